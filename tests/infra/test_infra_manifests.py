"""deploy/rbac.yaml against the Kubernetes gateway's calls, one ClusterRole per function, and the CRDs:
structural schemas with Karpenter's group, versions, scope and columns, that accept the NodePools and
EC2NodeClasses users already have."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from serverless_karpenter.naming import FUNCTION_NAMES

from infra.access import kubernetes_group

pytestmark = pytest.mark.infra

REPO = Path(__file__).resolve().parents[2]
RBAC = REPO / "deploy" / "rbac.yaml"
CRD_DIR = REPO / "deploy" / "crds"
ADAPTERS = REPO / "layers" / "core" / "python" / "serverless_karpenter" / "adapters"
GATEWAY = ADAPTERS / "kubernetes.py"
# Adapters that call the API through the gateway's clients (``kube.custom...``) with the functions'
# identity; operator_reads.py is the operator's own (doctor), outside the functions' ClusterRole.
OPERATOR_ONLY = {"operator_reads.py"}
SCENARIOS = REPO / "simulator" / "serverless_karpenter_sim" / "scenarios"

API_GROUPS = {
    "CoreV1Api": "",
    "AppsV1Api": "apps",
    "PolicyV1Api": "policy",
    "StorageV1Api": "storage.k8s.io",
    "EventsV1Api": "events.k8s.io",
    "CoordinationV1Api": "coordination.k8s.io",
}
CUSTOM_RESOURCE_GROUPS = {
    "nodepools": "karpenter.sh",
    "nodeoverlays": "karpenter.sh",
    "nodeclaims": "karpenter.sh",
    "ec2nodeclasses": "karpenter.k8s.aws",
}
VERBS = {
    "list": "list",
    "read": "get",
    "create": "create",
    "patch": "patch",
    "replace": "update",
    "delete": "delete",
}
CLIENT_METHOD = re.compile(
    r"^(list|read|create|patch|replace|delete)_(namespaced_)?(?P<resource>[a-z_]+?)(_for_all_namespaces)?$"
)
CUSTOM_METHOD = re.compile(
    r"^(list|get|create|patch|replace|delete)_(namespaced_|cluster_)custom_object(?P<status>_status)?$"
)
# Resources the issue requires the ClusterRole to cover, whether or not the gateway reads them yet.
REQUIRED_RESOURCES = {
    ("", "pods"),
    ("", "pods/eviction"),
    ("", "nodes"),
    ("", "events"),
    ("policy", "poddisruptionbudgets"),
    ("apps", "daemonsets"),
    ("", "persistentvolumeclaims"),
    ("", "persistentvolumes"),
    ("storage.k8s.io", "storageclasses"),
    ("karpenter.sh", "nodepools"),
    ("karpenter.k8s.aws", "ec2nodeclasses"),
    ("karpenter.sh", "nodeoverlays"),
}


def plural(snake: str) -> str:
    word = snake.replace("_", "")
    return word + ("es" if word.endswith(("s", "ss")) else "s")


def client_resource(method: str) -> tuple[str, str] | None:
    match = CLIENT_METHOD.match(method)
    if match is None:
        return None
    resource = match["resource"]
    for subresource in ("eviction", "status", "log", "binding"):
        if resource.endswith("_" + subresource):
            return plural(resource.removesuffix("_" + subresource)) + "/" + subresource, VERBS[match[1]]
    return plural(resource), VERBS[match[1]]


def gateway_modules() -> list[Path]:
    """The gateway, and every other adapter that calls the API through its clients."""
    return [GATEWAY] + [
        path
        for path in sorted(ADAPTERS.glob("*.py"))
        if path != GATEWAY and path.name not in OPERATOR_ONLY and "KubernetesGateway" in path.read_text()
    ]


def gateway_apis() -> dict[str, str]:
    """The gateway's client attributes (``core``, ``custom``, ...) and their API classes."""
    apis: dict[str, str] = {}
    for node in ast.walk(ast.parse(GATEWAY.read_text())):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and isinstance(node.targets[0], ast.Attribute)
        ):
            apis[node.targets[0].attr] = node.value.func.attr
    return apis


def gateway_permissions() -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) for every Kubernetes API method the gateway and its adapters reference."""
    apis = gateway_apis()
    needed: set[tuple[str, str, str]] = set()
    for module in gateway_modules():
        needed |= module_permissions(ast.parse(module.read_text()), apis)
    return needed


def module_permissions(tree: ast.Module, apis: dict[str, str]) -> set[tuple[str, str, str]]:
    """What one module's ``self.<client>.<method>`` and ``kube.<client>.<method>`` calls need."""
    plurals = {
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in CUSTOM_RESOURCE_GROUPS
    }
    # A call that names its plural (call(self.custom.<method>, group, version, "nodepools", ...)) needs that
    # plural alone; one through a helper that takes the plural as a variable may touch any of them.
    named: dict[int, set[str]] = {}
    for call in ast.walk(tree):
        if isinstance(call, ast.Call):
            constants = {a.value for a in call.args if isinstance(a, ast.Constant) and a.value in plurals}
            for arg in call.args:
                if constants and isinstance(arg, ast.Attribute):
                    named[id(arg)] = constants
    # A list method called with watch=True is a watch (the pending pods' watch in the watcher).
    watched = {
        id(call.func)
        for call in ast.walk(tree)
        if isinstance(call, ast.Call)
        and any(
            k.arg == "watch" and isinstance(k.value, ast.Constant) and k.value.value is True
            for k in call.keywords
        )
    }
    needed: set[tuple[str, str, str]] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)):
            continue
        if not (isinstance(node.value.value, ast.Name) and node.value.value.id in ("self", "kube")):
            continue
        api_class = apis.get(node.value.attr)
        if api_class == "CustomObjectsApi":
            match = CUSTOM_METHOD.match(node.attr)
            assert match, f"unmapped custom-object call {node.attr}"
            verb = {"get": "get", "replace": "update"}.get(match[1], match[1])
            for name in named.get(id(node), plurals):
                resource = name + "/status" if match["status"] else name
                needed.add((CUSTOM_RESOURCE_GROUPS[name], resource, verb))
        elif api_class is not None:
            assert api_class in API_GROUPS, f"unmapped API class {api_class}"
            mapped = client_resource(node.attr)
            assert mapped, f"unmapped client method {node.attr}"
            if id(node) in watched:
                assert mapped[1] == "list", f"watch=True on {node.attr}"
                mapped = (mapped[0], "watch")
            needed.add((API_GROUPS[api_class], *mapped))
    return needed


def rbac_documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(RBAC.read_text()) if d]


def cluster_roles() -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in rbac_documents() if d["kind"] == "ClusterRole"}


def role_grants(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def granted(function: str | None = None) -> set[tuple[str, str, str]]:
    """What ``function``'s ClusterRole grants; with no function, what any of them does."""
    roles = cluster_roles()
    if function is not None:
        return role_grants(roles[kubernetes_group(function)])
    return set().union(*(role_grants(role) for role in roles.values()))


# What each function's code calls through the gateway, written out from reading it (the simulation, with
# RBAC enforced, fails with a 403 on anything missing here: tests/integration/test_sim_rbac.py and every
# other simulation). Least privilege: a function gets these and nothing more.
EVENTS = {("", "events", "create"), ("", "events", "get"), ("", "events", "patch")}  # record_event
NODECLAIM_GET = {("karpenter.sh", "nodeclaims", "get")}
# NodeClaimObjects.release: delete the object, then remove our finalizer (a JSON patch).
NODECLAIM_RELEASE = {("karpenter.sh", "nodeclaims", "delete"), ("karpenter.sh", "nodeclaims", "patch")}
EXPECTED_ROLES: dict[str, set[tuple[str, str, str]]] = {
    # provisioning.usecases.watch: list the pending pods, then watch them; nothing else.
    "watcher": {("", "pods", "list"), ("", "pods", "watch")},
    # provisioning.provisioner (the scheduling inputs, NodePool validation status, the pods of deleting
    # nodes with their PDBs: termination.handoff.pods_on_deleting_nodes), lifecycle.reconciler
    # (registration patch, liveness: begin_deletion's get/patch/delete and the finalizer's patch, the
    # EC2NodeClass status), runtime's NodeOverlay reads.
    "provisioner": {
        ("", "pods", "list"),
        ("", "nodes", "get"),
        ("", "nodes", "list"),
        ("", "nodes", "patch"),
        ("", "nodes", "delete"),
        *EVENTS,
        ("", "namespaces", "list"),
        ("", "persistentvolumeclaims", "list"),
        ("", "persistentvolumes", "list"),
        ("storage.k8s.io", "storageclasses", "list"),
        ("storage.k8s.io", "csinodes", "list"),
        ("policy", "poddisruptionbudgets", "list"),
        ("apps", "daemonsets", "list"),
        ("karpenter.sh", "nodepools", "list"),
        ("karpenter.sh", "nodeoverlays", "list"),
        ("karpenter.sh", "nodepools/status", "patch"),
        # lifecycle.adoption: NodeClaim objects with no record (listed; leftovers deleted, finalizer patched)
        ("karpenter.sh", "nodeclaims", "list"),
        ("karpenter.sh", "nodeclaims", "patch"),
        ("karpenter.sh", "nodeclaims", "delete"),
        ("karpenter.k8s.aws", "ec2nodeclasses", "list"),
        ("karpenter.k8s.aws", "ec2nodeclasses/status", "patch"),
        # lifecycle.nodeclaim_writer: the NodeClaim objects mirrored from the records.
        *NODECLAIM_GET,
        ("karpenter.sh", "nodeclaims", "list"),
        ("karpenter.sh", "nodeclaims", "create"),
        *NODECLAIM_RELEASE,
        ("karpenter.sh", "nodeclaims/status", "patch"),
    },
    # interruption.actions: get_node and record_event, then begin_deletion (taint patch, delete_node)
    # or, for an instance already gone, delete_node and remove_node_finalizer (a patch).
    "interruption": {("", "nodes", "get"), ("", "nodes", "patch"), ("", "nodes", "delete"), *EVENTS},
    # disruption.usecases: the candidates' inputs (pods, nodes, PDBs, DaemonSets, NodePools, node classes,
    # overlays), set_disrupted_taint (get, patch) and begin_deletion (delete).
    "disruption": {
        ("", "pods", "list"),
        ("", "nodes", "get"),
        ("", "nodes", "list"),
        ("", "nodes", "patch"),
        ("", "nodes", "delete"),
        *EVENTS,
        ("policy", "poddisruptionbudgets", "list"),
        ("apps", "daemonsets", "list"),
        ("karpenter.sh", "nodepools", "list"),
        ("karpenter.sh", "nodeoverlays", "list"),
        ("karpenter.k8s.aws", "ec2nodeclasses", "list"),
        # Events on NodeClaims (DisruptionTerminating, DisruptionBlocked, Unconsolidatable): their uids
        # from one list, remembered by the warm function.
        ("karpenter.sh", "nodeclaims", "list"),
    },
    # termination.terminator: the deleting nodes and their pods, evictions, deletions past the deadline,
    # the taint and the finalizer (patches).
    "termination": {
        ("", "pods", "list"),
        ("", "pods", "delete"),
        ("", "pods/eviction", "create"),
        ("", "nodes", "list"),
        ("", "nodes", "patch"),
        *EVENTS,
        *NODECLAIM_GET,
        *NODECLAIM_RELEASE,  # the NodeClaim object released once the instance is gone
    },
}


def test_each_function_has_its_own_cluster_role_with_only_what_its_code_uses() -> None:
    assert set(cluster_roles()) == {kubernetes_group(f) for f in FUNCTION_NAMES}
    for function in FUNCTION_NAMES:
        assert granted(function) == EXPECTED_ROLES[function], function
    # The point of the split: the watcher, which runs all day, cannot touch a node or a pod.
    assert granted("watcher") == {("", "pods", "list"), ("", "pods", "watch")}
    assert not {p for f in ("watcher", "provisioner", "disruption", "interruption") for p in granted(f)} & {
        ("", "pods/eviction", "create"),
        ("", "pods", "delete"),
    }


def test_cluster_role_covers_every_call_the_gateway_makes() -> None:
    needed = gateway_permissions()
    assert ("", "pods/eviction", "create") in needed  # the scan sees through _call(self.core.<method>, ...)
    assert ("karpenter.k8s.aws", "ec2nodeclasses/status", "patch") in needed  # and into nodeclass_status.py
    assert ("", "pods", "watch") in needed  # list_pod_for_all_namespaces(watch=True, ...)
    assert needed <= granted(), sorted(needed - granted())


def test_cluster_role_grants_only_what_is_used_or_required() -> None:
    needed = gateway_permissions()
    for group, resource, verb in granted() - needed:
        # Beyond the gateway's calls: only reads of the resources the issue lists for scheduling.
        assert (group, resource) in REQUIRED_RESOURCES, (group, resource, verb)
        assert verb in ("get", "list"), (group, resource, verb)
    assert {(g, r) for g, r, _ in granted()} >= REQUIRED_RESOURCES
    assert not [p for p in granted() if "*" in p]


def test_each_binding_subject_is_its_functions_access_entry_group() -> None:
    bindings = {d["metadata"]["name"]: d for d in rbac_documents() if d["kind"] == "ClusterRoleBinding"}
    assert set(bindings) == set(cluster_roles())
    for function in FUNCTION_NAMES:
        group = kubernetes_group(function)
        assert bindings[group]["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": group,
        }
        assert bindings[group]["subjects"] == [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}
        ]
        assert not group.startswith("system:")  # EKS access entries refuse system: groups


# -- CRDs -----------------------------------------------------------------------------------------------

EXPECTED_CRDS = {
    "nodepools.karpenter.sh": ("karpenter.sh", "NodePool", "v1", {"NodeClass", "Nodes", "Ready", "Age"}),
    "ec2nodeclasses.karpenter.k8s.aws": ("karpenter.k8s.aws", "EC2NodeClass", "v1", {"Ready", "Age"}),
    "nodeoverlays.karpenter.sh": ("karpenter.sh", "NodeOverlay", "v1alpha1", {"Ready", "Age"}),
    "nodeclaims.karpenter.sh": (
        "karpenter.sh",
        "NodeClaim",
        "v1",
        {"Type", "Capacity", "Zone", "Node", "Ready", "Age"},
    ),
}


def crds() -> dict[str, dict[str, Any]]:
    found = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        document = yaml.safe_load(path.read_text())
        assert document["apiVersion"] == "apiextensions.k8s.io/v1"
        assert document["kind"] == "CustomResourceDefinition"
        assert path.name == f"{document['spec']['group']}_{document['spec']['names']['plural']}.yaml"
        found[document["metadata"]["name"]] = document
    return found


def schema_nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from schema_nodes(child, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from schema_nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from schema_nodes(schema["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize("name", sorted(EXPECTED_CRDS))
def test_crd_group_version_scope_subresources_and_columns(name: str) -> None:
    crd = crds()[name]
    group, kind, version, default_columns = EXPECTED_CRDS[name]
    spec = crd["spec"]
    assert spec["group"] == group
    assert spec["scope"] == "Cluster"
    assert spec["names"]["kind"] == kind
    assert spec["names"]["singular"] == kind.lower()
    assert spec["names"]["plural"] == name.split(".", maxsplit=1)[0]
    assert "karpenter" in spec["names"]["categories"]
    (served,) = spec["versions"]
    assert (served["name"], served["served"], served["storage"]) == (version, True, True)
    # As released: NodePools also scale (a static NodePool's spec.replicas, counted by status.nodes).
    scale = {"scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.nodes"}}
    assert served["subresources"] == {"status": {}, **(scale if kind == "NodePool" else {})}
    columns = {c["name"]: c for c in served["additionalPrinterColumns"]}
    assert {n for n, c in columns.items() if c.get("priority", 0) == 0} == default_columns
    assert columns["Ready"]["jsonPath"] == '.status.conditions[?(@.type=="Ready")].status'
    assert columns["Age"] == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


@pytest.mark.parametrize("name", sorted(EXPECTED_CRDS))
def test_crd_schema_is_structural(name: str) -> None:
    schema = crds()[name]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert set(schema["properties"]) == {"apiVersion", "kind", "metadata", "spec", "status"}
    # The released CRDs type the status too: what we write there is validated like the spec.
    status = schema["properties"]["status"]
    assert status["type"] == "object" and "conditions" in status["properties"]
    for path, node in schema_nodes(schema):
        if "anyOf" in node:  # only int-or-string, the one anyOf a structural schema allows without a type
            assert node.get("x-kubernetes-int-or-string") is True, path
            continue
        assert "type" in node, f"{name}{path} has no type"
        if node["type"] == "object" and path not in ("", ".metadata"):
            has_shape = "properties" in node or "additionalProperties" in node
            assert has_shape or node.get("x-kubernetes-preserve-unknown-fields"), (
                f"{name}{path} is an untyped object"
            )


def _validator(name: str) -> jsonschema.Draft7Validator:
    schema = crds()[name]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return jsonschema.Draft7Validator(schema)


def scenario_manifests() -> list[dict[str, Any]]:
    manifests = []
    for path in sorted(SCENARIOS.glob("*.yaml")):
        manifests.extend(yaml.safe_load(path.read_text()).get("manifests", []))
    return manifests


KARPENTER_DOCS_NODEPOOL = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodePool",
    "metadata": {"name": "gpu"},
    "spec": {
        "weight": 10,
        "template": {
            "metadata": {"labels": {"team": "ml"}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {
                        "key": "karpenter.k8s.aws/instance-family",
                        "operator": "In",
                        "values": ["g5"],
                        "minValues": 1,
                    }
                ],
                "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
                "expireAfter": "Never",
                "terminationGracePeriod": "48h",
            },
        },
        "limits": {"cpu": "1000", "memory": "1000Gi", "nvidia.com/gpu": 8},
        "disruption": {
            "consolidationPolicy": "WhenEmpty",
            "consolidateAfter": "30s",
            "budgets": [
                {"nodes": "20%", "reasons": ["Empty", "Drifted"]},
                {"nodes": "0", "schedule": "@daily", "duration": "10m"},
            ],
        },
    },
}


def test_crds_accept_the_manifests_users_already_have() -> None:
    by_kind = {kind: name for name, (_, kind, _, _) in EXPECTED_CRDS.items()}
    manifests = [m for m in scenario_manifests() if m.get("kind") in by_kind] + [KARPENTER_DOCS_NODEPOOL]
    assert {m["kind"] for m in manifests} >= {"NodePool", "EC2NodeClass"}
    for manifest in manifests:
        errors = [e.message for e in _validator(by_kind[manifest["kind"]]).iter_errors(manifest)]
        assert errors == [], (manifest["metadata"]["name"], errors)


@pytest.mark.parametrize(
    ("kind", "patch", "message"),
    [
        (
            "NodePool",
            {"spec": {"template": {"spec": {"nodeClassRef": None}}}},
            "'nodeClassRef' is a required property",
        ),
        (
            "NodePool",
            {"spec": {"template": {"spec": {"requirements": [{"key": "k", "operator": "Equals"}]}}}},
            "is not one of",
        ),
        ("NodePool", {"spec": {"weight": 0}}, "less than the minimum"),
        ("NodePool", {"spec": {"disruption": {"consolidationPolicy": "WhenUnderutilized"}}}, "is not one of"),
        ("EC2NodeClass", {"spec": {"amiFamily": "Ubuntu"}}, "is not one of"),
        ("EC2NodeClass", {"spec": {"amiSelectorTerms": []}}, "should be non-empty"),
    ],
)
def test_crds_reject_what_karpenter_rejects(kind: str, patch: dict[str, Any], message: str) -> None:
    base = {
        "NodePool": KARPENTER_DOCS_NODEPOOL,
        "EC2NodeClass": {
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {
                "role": "KarpenterNodeRole-demo",
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            },
        },
    }[kind]
    name = next(n for n, (_, k, _, _) in EXPECTED_CRDS.items() if k == kind)
    assert list(_validator(name).iter_errors(base)) == []
    manifest = _merge(base, patch)
    errors = " ".join(e.message for e in _validator(name).iter_errors(manifest))
    assert message in errors


def _merge(base: Any, patch: Any) -> Any:
    """A JSON merge patch (RFC 7386): None deletes a key."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for key, value in patch.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = _merge(base.get(key), value) if key in base else value
        return merged
    return patch
