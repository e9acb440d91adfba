"""`serverless-karpenter plan` on hostile and edge-case inputs: every input gives a plan (exit 0) or exit 2
with one line naming the file, the object, the field and the rule; never a traceback.

Each case is refused where the kube-apiserver or Karpenter's CRDs would refuse it, and before scheduling.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from serverless_karpenter.api import labels as wk
from serverless_karpenter_cli.main import main

from tests.builders import deployment, nodeclass, nodepool

Obj = dict[str, Any]


def run_plan(capsys: pytest.CaptureFixture[str], *paths: Path, output: str = "json") -> tuple[int, str, str]:
    args = ["plan", *(a for p in paths for a in ("-f", str(p))), "-o", output]
    code = main(args)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and code in (0, 2), captured.err
    return code, captured.out, captured.err


def one_line_error(capsys: pytest.CaptureFixture[str], *paths: Path) -> str:
    code, _, err = run_plan(capsys, *paths)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    return lines[0]


def dump(tmp_path: Path, *docs: Any, name: str = "m.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(list(docs), sort_keys=False, allow_unicode=True))
    return path


def web(**pod_spec: Any) -> Obj:
    return deployment("web", 2, **pod_spec)


def _set(doc: Obj, path: str, value: Any) -> Obj:
    """``doc`` with the value at a dotted path (list indexes as numbers) replaced."""
    out = copy.deepcopy(doc)
    parts: list[Any] = [int(p) if p.isdigit() else p for p in path.split(".")]
    cursor: Any = out
    for part in parts[:-1]:
        cursor = cursor[part]
    cursor[parts[-1]] = value
    return out


CONTAINER = "spec.template.spec.containers.0"
REQUIRED_TERM = "nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"


def _affinity(operator: str, values: list[str]) -> Obj:
    term = {"matchExpressions": [{"key": "example.com/size", "operator": operator, "values": values}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def _spread(**fields: Any) -> Obj:
    return {
        "maxSkew": 1,
        "topologyKey": wk.ZONE,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}},
        **fields,
    }


# (object next to a valid NodePool and EC2NodeClass, what the one error line must name)
OBJECT_ERRORS: dict[str, tuple[Obj, list[str]]] = {
    "memory abc": (
        _set(web(), f"{CONTAINER}.resources.requests.memory", "abc"),
        [
            'Deployment "default/web"',
            "spec.template.spec.containers[0].resources.requests.memory",
            "quantity",
        ],
    ),
    "replicas three": (_set(web(), "spec.replicas", "three"), ["spec.replicas", "must be an integer"]),
    "containers a string": (
        _set(web(), "spec.template.spec.containers", "x"),
        ["spec.template.spec.containers", "must be a list"],
    ),
    "affinity operator Foo": (
        web(affinity=_affinity("Foo", ["a"])),
        [f"spec.template.spec.affinity.{REQUIRED_TERM}[0].matchExpressions[0].operator", "must be one of In"],
    ),
    "Gt beyond int64": (
        web(affinity=_affinity("Gt", ["99999999999999999999"])),
        [f"{REQUIRED_TERM}[0].matchExpressions[0].values[0]", "integer that fits in 64 bits"],
    ),
    "Lt with two values": (
        web(affinity=_affinity("Lt", ["1", "2"])),
        ["matchExpressions[0].values", "single value"],
    ),
    "negative request": (
        _set(web(), f"{CONTAINER}.resources.requests.cpu", "-1"),
        ["spec.template.spec.containers[0].resources.requests.cpu", "greater than or equal to 0"],
    ),
    "negative replicas": (_set(web(), "spec.replicas", -3), ["spec.replicas", "greater than or equal to 0"]),
    "maxSkew 0": (
        web(topologySpreadConstraints=[_spread(maxSkew=0)]),
        ["spec.template.spec.topologySpreadConstraints[0].maxSkew", "greater than or equal to 1"],
    ),
    "minDomains 0": (
        web(topologySpreadConstraints=[_spread(minDomains=0)]),
        ["topologySpreadConstraints[0].minDomains", "greater than or equal to 1"],
    ),
    "whenUnsatisfiable unknown": (
        web(topologySpreadConstraints=[_spread(whenUnsatisfiable="Maybe")]),
        ["topologySpreadConstraints[0].whenUnsatisfiable", "DoNotSchedule, ScheduleAnyway"],
    ),
    "tolerations a string": (
        web(tolerations="all"),
        ["spec.template.spec.tolerations", "must be a list"],
    ),
    "toleration effect unknown": (
        web(tolerations=[{"key": "a", "operator": "Exists", "effect": "Sometimes"}]),
        ["spec.template.spec.tolerations[0].effect", "NoSchedule, PreferNoSchedule, NoExecute"],
    ),
    "huge replicas": (
        _set(web(), "spec.replicas", 99999999999999999999),
        ["spec.replicas", "less than or equal"],
    ),
    "replicas at int32 max": (_set(web(), "spec.replicas", 2**31 - 1), ["more than 100000 pods"]),
    "huge quantity": (
        _set(web(), f"{CONTAINER}.resources.requests.cpu", "1e400"),
        ["spec.template.spec.containers[0].resources.requests.cpu", "too large"],
    ),
    "unicode name": (_set(web(), "metadata.name", "wéb-ünïcode"), ["metadata.name", "DNS subdomain"]),
    "unicode label value": (
        _set(web(), "spec.template.metadata.labels", {"app": "wéb"}),
        ["spec.template.metadata.labels[app]", "letters, digits"],
    ),
    "label value not a string": (
        _set(web(), "spec.template.metadata.labels", {"enabled": True}),
        ["spec.template.metadata.labels[enabled]", "must be a string"],
    ),
    "spec null": (_set(web(), "spec", None), ['Deployment "default/web"', "spec: is required"]),
    "template null": (_set(web(), "spec.template", None), ["spec.template: is required"]),
    "metadata null": (_set(web(), "metadata", None), ["Deployment (unnamed)", "metadata: is required"]),
    "name missing": (_set(web(), "metadata", {"namespace": "default"}), ["metadata.name: is required"]),
    "container without a name": (_set(web(), f"{CONTAINER}.name", None), ["containers[0].name: is required"]),
    "request above limit": (
        _set(web(), f"{CONTAINER}.resources.limits", {"cpu": "500m"}),
        ["containers[0].resources.requests.cpu", "less than or equal to the cpu limit"],
    ),
    "hostPort out of range": (
        _set(web(), f"{CONTAINER}.ports", [{"containerPort": 80, "hostPort": 70000}]),
        ["containers[0].ports[0].hostPort", "less than or equal to 65535"],
    ),
    "NodePool spec null": (_set(nodepool("other"), "spec", None), ['NodePool "other"', "spec"]),
    "Karpenter v1beta1 NodePool": (
        _set(nodepool("old"), "apiVersion", "karpenter.sh/v1beta1"),
        ['NodePool "old"', "apiVersion", "only karpenter.sh/v1"],
    ),
    "Node allocatable not a quantity": (
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n"},
            "status": {"allocatable": {"cpu": "x"}},
        },
        ['Node "n"', "status.allocatable.cpu", "quantity"],
    ),
    "CSINode count negative": (
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSINode",
            "metadata": {"name": "n"},
            "spec": {"drivers": [{"name": "ebs.csi.aws.com", "nodeID": "i-1", "allocatable": {"count": -1}}]},
        },
        ['CSINode "n"', "spec.drivers[0].allocatable.count", "greater than or equal to 0"],
    ),
    "invalid NodeOverlay": (
        {
            "apiVersion": "karpenter.sh/v1alpha1",
            "kind": "NodeOverlay",
            "metadata": {"name": "cheap"},
            "spec": {"requirements": [], "price": "free"},
        },
        ['NodeOverlay "cheap"', "spec.price"],
    ),
    "invalid NodeClaim": (
        {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "c"}, "spec": {}},
        ['NodeClaim "c"', "spec"],
    ),
}


@pytest.mark.parametrize("case", sorted(OBJECT_ERRORS))
def test_invalid_objects_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    doc, expected = OBJECT_ERRORS[case]
    path = dump(tmp_path, nodepool(), nodeclass(), doc)
    line = one_line_error(capsys, path)
    for fragment in [str(path), *expected]:
        assert fragment in line, line


def _bomb(levels: int = 9) -> str:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for level in range(1, levels):
        refs = ", ".join([f"*a{level - 1}"] * 9)
        lines.append(f"a{level}: &a{level} [{refs}]")
    return "\n".join(lines) + "\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb}\n"


# (file contents, what the one error line must name besides the file)
FILE_ERRORS: dict[str, tuple[str | bytes, list[str]]] = {
    "kind null": (
        "apiVersion: apps/v1\nkind: null\nmetadata: {name: web}\n",
        ["document 1", '"default/web"', "kind: is required"],
    ),
    "kind a number": ("apiVersion: apps/v1\nkind: 5\nmetadata: {name: web}\n", ["kind: must be a string"]),
    "kind missing": ("apiVersion: v1\nmetadata: {name: web}\n", ["kind: is required"]),
    "apiVersion a list": ("apiVersion: [v1]\nkind: Pod\n", ["apiVersion: must be a string"]),
    "a scalar": ("just some text\n", ["document 1", "not a Kubernetes object"]),
    "a list of strings": ("- a\n- b\n", ["document 1", "not a Kubernetes object", "list"]),
    "second document a scalar": (
        "kind: Namespace\napiVersion: v1\nmetadata: {name: a}\n---\n42\n",
        ["document 2"],
    ),
    "List items not a list": ("apiVersion: v1\nkind: List\nitems: 5\n", ["items: must be a list"]),
    "List of strings": ("apiVersion: v1\nkind: List\nitems: [a, b]\n", ["not a Kubernetes object"]),
    "not UTF-8": (b"\xff\xfe\x00k\x00i\x00n\x00d\x00", ["not UTF-8"]),
    "binary": (bytes(range(256)) * 4, ["not UTF-8"]),
    "NUL in text": ("kind: Pod\x00\n", ["not valid YAML"]),
    "JSON with trailing garbage": ('{"apiVersion": "v1", "kind": "Pod"} }}garbage', ["not valid YAML"]),
    "duplicate keys": (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {}\nspec: {containers: []}\n",
        ["not valid YAML", "'spec' already defined"],
    ),
    "billion laughs": (_bomb(), ["document 1", "alias bomb"]),
    "recursive alias": ("a: &a [*a]\n", ["recursive alias"]),
    "deep nesting": ("a: " + "[" * 5000 + "]" * 5000 + "\n", ["nested deeper"]),
    "unclosed quote": ('apiVersion: "v1\nkind: Pod\n', ["not valid YAML"]),
}


@pytest.mark.parametrize("case", sorted(FILE_ERRORS))
def test_unreadable_files_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    content, expected = FILE_ERRORS[case]
    good = dump(tmp_path, nodepool(), nodeclass(), web(), name="good.yaml")
    bad = tmp_path / "bad.yaml"
    if isinstance(content, bytes):
        bad.write_bytes(content)
    else:
        bad.write_text(content)
    started = time.monotonic()
    line = one_line_error(capsys, good, bad)
    assert time.monotonic() - started < 20  # an alias bomb or deep nesting must not hang
    for fragment in [str(bad), *expected]:
        assert fragment in line, line


def test_empty_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = dump(tmp_path, nodepool(), nodeclass(), web(), name="good.yaml")
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    separators = tmp_path / "separators.yaml"
    separators.write_text("---\n---\n# only a comment\n---\n")
    code, out, _ = run_plan(capsys, good, empty, separators)
    assert code == 0 and json.loads(out)["nodeclaims"]
    # Nothing to provision with: one line, as before.
    assert "no NodePool" in one_line_error(capsys, empty)
    folder = tmp_path / "nothing"
    folder.mkdir()
    (folder / "README.md").write_text("not a manifest")
    line = one_line_error(capsys, good, folder)
    assert str(folder) in line and "no .yaml, .yml, .json files" in line


def test_nulls_where_kubernetes_allows_them_give_a_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nulls = web(tolerations=None, affinity={"nodeAffinity": None}, topologySpreadConstraints=None)
    nulls = _set(nulls, f"{CONTAINER}.resources.requests", None)
    nulls = _set(nulls, "spec.template.metadata.labels", None)
    nulls = _set(nulls, "spec.replicas", None)  # defaulted to 1
    dated = _set(web(), "metadata.name", "dated")
    dated = _set(dated, "spec.template.metadata.labels", {"app": "dated", "released": "2024-01-01"})
    text = yaml.safe_dump_all([nodepool(), nodeclass(), nulls], sort_keys=False)
    # An unquoted date is a string to the API server (JSON has no timestamps), so a valid label value.
    text += "---\n" + yaml.safe_dump(dated, sort_keys=False).replace("'2024-01-01'", "2024-01-01")
    path = tmp_path / "m.yaml"
    path.write_text(text)
    code, out, _ = run_plan(capsys, path)
    pods = sorted(p for claim in json.loads(out)["nodeclaims"] for p in claim["pods"])
    assert code == 0 and pods == ["default/dated-0", "default/dated-1", "default/web-0"]


def test_a_list_kind_and_json_manifests_give_a_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.json"
    path.write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": [nodepool(), nodeclass(), web()]})
    )
    code, out, _ = run_plan(capsys, path)
    assert code == 0 and len([p for c in json.loads(out)["nodeclaims"] for p in c["pods"]]) == 2


def test_a_nodepool_with_a_missing_nodeclass_gives_a_plan_that_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_plan(capsys, dump(tmp_path, nodepool(), web()))
    [first, _] = json.loads(out)["unschedulable"]
    assert code == 0 and 'nodeClassRef "default" is not a ready EC2NodeClass' in first["reason"]


# -- what was silently accepted ---------------------------------------------------------------------


def test_foreign_nodepools_are_ignored_and_listed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Another project's NodePool kind: heavier than ours, and valid as ours. Its group is not karpenter.sh,
    # so Karpenter never sees it, and neither does plan.
    foreign = _set(nodepool("theirs"), "apiVersion", "example.com/v1")
    foreign["spec"]["weight"] = 100
    no_group = _set(nodepool("bare"), "apiVersion", None)
    del no_group["apiVersion"]
    garbage = {
        "apiVersion": "other.io/v1",
        "kind": "NodePool",
        "metadata": {"name": "junk"},
        "spec": {"x": [1]},
    }
    path = dump(tmp_path, foreign, no_group, garbage, nodepool(), nodeclass(), web())
    code, out, _ = run_plan(capsys, path)
    plan = json.loads(out)
    assert code == 0 and {c["nodepool"] for c in plan["nodeclaims"]} == {"default"}
    assert [(i["kind"], i["apiVersion"], i["name"]) for i in plan["ignored"]] == [
        ("NodePool", "example.com/v1", "theirs"),
        ("NodePool", "", "bare"),
        ("NodePool", "other.io/v1", "junk"),
    ]
    assert all(i["file"] == str(path) and i["reason"] for i in plan["ignored"])
    # In table mode the ignored manifests are listed on stderr.
    code, _, err = run_plan(capsys, path, output="table")
    assert (
        code == 0
        and "ignored: NodePool example.com/v1 theirs" in err
        and "ignored: NodePool (no apiVersion) bare" in err
    )


def test_of_two_nodepools_with_one_name_the_last_wins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = nodepool()
    last = nodepool()
    last["spec"]["template"]["spec"]["requirements"] = [
        {"key": wk.INSTANCE_TYPE, "operator": "In", "values": ["m5.2xlarge"]}
    ]
    path = dump(tmp_path, first, nodeclass(), web(), last)
    code, out, _ = run_plan(capsys, path)
    plan = json.loads(out)
    # kubectl apply -f: the second apply replaces the first.
    assert code == 0 and {c["instance_type"] for c in plan["nodeclaims"]} == {"m5.2xlarge"}
    [replaced] = plan["ignored"]
    assert (replaced["kind"], replaced["name"]) == ("NodePool", "default")
    assert "replaced by a later NodePool" in replaced["reason"] and "document 4" in replaced["reason"]


def test_a_scalar_file_next_to_good_ones_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = dump(tmp_path, nodepool(), nodeclass(), web(), name="good.yaml")
    (tmp_path / "typo.yaml").write_text("apiVersion v1\n")
    line = one_line_error(capsys, tmp_path)
    assert str(tmp_path / "typo.yaml") in line and "not a Kubernetes object" in line
    assert good.exists()


# -- NodeOverlay ------------------------------------------------------------------------------------


def _overlay(name: str, **spec: Any) -> Obj:
    return {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": name},
        "spec": spec,
    }


def test_overlay_prices_steer_the_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = [nodepool(), nodeclass(), deployment("web", 1, cpu="1", memory="1Gi")]
    _, out, _ = run_plan(capsys, dump(tmp_path, *base, name="plain.yaml"))
    [claim] = json.loads(out)["nodeclaims"]
    favourite = next(name for name in claim["instance_type_options"] if name != claim["instance_type"])
    # A Savings Plan makes another type nearly free: the provisioner's catalog applies it, so plan must.
    overlay = _overlay(
        "savings",
        requirements=[{"key": wk.INSTANCE_TYPE, "operator": "In", "values": [favourite]}],
        price="0.0001",
    )
    _, out, _ = run_plan(capsys, dump(tmp_path, *base, overlay, name="overlay.yaml"))
    [claim] = json.loads(out)["nodeclaims"]
    assert (claim["instance_type"], claim["price_per_hour"]) == (favourite, 0.0001)


def test_overlay_capacity_makes_room_for_extended_resources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fpga = deployment("fpga", 1)
    fpga = _set(
        fpga,
        f"{CONTAINER}.resources",
        {"requests": {"example.com/fpga": "1"}, "limits": {"example.com/fpga": "1"}},
    )
    docs = [nodepool(), nodeclass(), fpga]
    _, out, _ = run_plan(capsys, dump(tmp_path, *docs, name="plain.yaml"))
    assert json.loads(out)["nodeclaims"] == []
    overlay = _overlay(
        "fpgas",
        requirements=[{"key": wk.INSTANCE_TYPE, "operator": "In", "values": ["m5.xlarge"]}],
        capacity={"example.com/fpga": "2"},
    )
    _, out, _ = run_plan(capsys, dump(tmp_path, *docs, overlay, name="overlay.yaml"))
    [claim] = json.loads(out)["nodeclaims"]
    assert claim["instance_type"] == "m5.xlarge" and claim["pods"] == ["default/fpga-0"]


def test_overlays_apply_to_a_catalog_file_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from serverless_karpenter.catalog._data import read_package_json

    raw = read_package_json("instance-types-us-east-1.json")
    names = ("m5.large", "c5.large")
    catalog = {
        "region": "us-east-1",
        "InstanceTypes": [t for t in raw["instance_types"] if t["InstanceType"] in names],
        "InstanceTypeOfferings": [
            {"InstanceType": name, "Location": "us-east-1a", "LocationType": "availability-zone"}
            for name in names
        ],
        "OnDemandPrices": {"m5.large": 0.096, "c5.large": 0.085},
    }
    catalog_path = tmp_path / "catalog.json"
    catalog_path.write_text(json.dumps(catalog))
    overlay = _overlay(
        "m5",
        requirements=[{"key": wk.INSTANCE_TYPE, "operator": "In", "values": ["m5.large"]}],
        priceAdjustment="-50%",
    )
    path = dump(tmp_path, nodepool(), nodeclass(), deployment("web", 1, cpu="500m", memory="512Mi"), overlay)
    assert main(["plan", "-f", str(path), "--catalog", str(catalog_path), "-o", "json"]) == 0
    [claim] = json.loads(capsys.readouterr().out)["nodeclaims"]
    assert (claim["instance_type"], claim["price_per_hour"]) == ("m5.large", pytest.approx(0.048))


# -- NodeClaims -------------------------------------------------------------------------------------


def _nodeclaim(name: str, *, launched: bool, **status: Any) -> Obj:
    claim: Obj = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {wk.NODEPOOL: "default", wk.ZONE: "us-east-1a"}},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [
                {"key": wk.NODEPOOL, "operator": "In", "values": ["default"]},
                {"key": wk.INSTANCE_TYPE, "operator": "In", "values": ["m5.xlarge"]},
            ],
            "resources": {"requests": {"cpu": "1", "pods": "1"}},
        },
    }
    if launched:
        claim["status"] = {
            "providerID": f"aws:///us-east-1a/i-{name}",
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "58"},
            "allocatable": {"cpu": "3920m", "memory": "14Gi", "pods": "58"},
            **status,
        }
    return claim


def test_pending_pods_land_on_an_in_flight_nodeclaim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = [
        nodepool(),
        nodeclass(),
        deployment("web", 2, cpu="1", memory="1Gi"),
        _nodeclaim("inflight", launched=True),
    ]
    code, out, _ = run_plan(capsys, dump(tmp_path, *docs))
    plan = json.loads(out)
    assert code == 0 and plan["nodeclaims"] == []
    assert plan["existing_nodes"] == {"nodeclaim/inflight": ["default/web-0", "default/web-1"]}


def test_a_nodeclaim_not_launched_yet_has_no_room(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Karpenter schedules against a NodeClaim's status.allocatable, empty until the launch fills it.
    docs = [nodepool(), nodeclass(), deployment("web", 1), _nodeclaim("creating", launched=False)]
    _, out, _ = run_plan(capsys, dump(tmp_path, *docs))
    plan = json.loads(out)
    assert plan["existing_nodes"] == {} and [c["pods"] for c in plan["nodeclaims"]] == [["default/web-0"]]


def test_a_nodeclaim_whose_node_is_given_is_counted_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "ip-10-0-0-1", "labels": {wk.ZONE: "us-east-1a", wk.HOSTNAME: "ip-10-0-0-1"}},
        "spec": {"providerID": "aws:///us-east-1a/i-joined"},
        "status": {"allocatable": {"cpu": "3920m", "memory": "14Gi", "pods": "58"}},
    }
    claim = _nodeclaim("joined", launched=True, nodeName="ip-10-0-0-1")
    docs = [nodepool(), nodeclass(), deployment("web", 1), claim, node]
    _, out, _ = run_plan(capsys, dump(tmp_path, *docs))
    assert json.loads(out)["existing_nodes"] == {"ip-10-0-0-1": ["default/web-0"]}


def test_a_deleting_nodeclaim_is_not_capacity(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claim = _nodeclaim("leaving", launched=True)
    claim["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    _, out, _ = run_plan(capsys, dump(tmp_path, nodepool(), nodeclass(), deployment("web", 1), claim))
    plan = json.loads(out)
    assert plan["existing_nodes"] == {} and len(plan["nodeclaims"]) == 1
