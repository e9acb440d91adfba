"""`status` and `explain pod` against a running simulation: the CLI reads the same state table and
cluster the Lambdas use."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from serverless_karpenter.runtime import use_control_plane
from serverless_karpenter_cli.main import main
from serverless_karpenter_cli.status import age
from serverless_karpenter_sim.simulation import Simulation

from tests.builders import deployment, nodeclass, nodepool
from tests.integration.simulate import simulation

pytestmark = pytest.mark.integration

HUGE_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "huge", "namespace": "default"},
    "spec": {
        "containers": [
            {"name": "app", "image": "pause", "resources": {"requests": {"cpu": "900", "memory": "1Gi"}}}
        ]
    },
}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    scenario = {
        "name": "status",
        "manifests": [nodepool(), nodeclass(), deployment("web", 3), HUGE_POD],
        "steps": [],
    }
    sim = simulation(tmp_path_factory.mktemp("status"), scenario)
    try:
        sim.start()
        sim.run_for(150)
        use_control_plane(sim.plane)
        yield sim
    finally:
        sim.stop()


def test_status_lists_nodeclaims_pending_pods_and_cost(
    sim: Simulation, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    records = {r.name: r for r in sim.plane.store.list()}
    assert report["cluster"] == sim.cluster_name
    assert {c["name"] for c in report["nodeclaims"]} == set(records)
    assert report["nodeclaims"]
    for claim in report["nodeclaims"]:
        record = records[claim["name"]]
        assert claim["type"] == record.instance_type and claim["type"]
        assert claim["capacity"] == "on-demand"
        assert claim["zone"] == record.zone and claim["zone"].startswith("us-east-1")
        assert claim["node"] == record.node_name and claim["node"]
        assert claim["state"] == "Initialized"
        assert claim["nodepool"] == "default"
        assert claim["age"].endswith(("s", "m"))
    assert report["pending_pods"] == ["default/huge"]
    assert report["cost_per_hour"] == pytest.approx(sum(r.price_per_hour or 0 for r in records.values()))
    assert report["cost_per_hour"] > 0


def test_status_table_reads_like_kubectl(sim: Simulation, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "STATE", "AGE", "NODEPOOL"]
    record = sim.plane.store.list()[0]
    row = next(line for line in out if line.startswith(record.name))
    assert row.split()[1:6] == [
        record.instance_type,
        "on-demand",
        record.zone,
        record.node_name,
        "Initialized",
    ]
    assert "pending pods: 1 (default/huge)" in out
    assert any(line.startswith("cost: $") and "/h" in line for line in out)


def test_explain_pod_gives_each_nodepools_reason(sim: Simulation, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "pod", "default/huge"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("pod default/huge cannot be scheduled:")
    assert "nodepool default:" in out and "cpu" in out


def test_explain_pod_bound_and_unknown(sim: Simulation, capsys: pytest.CaptureFixture[str]) -> None:
    running = next(p for p in sim.kube.list_pods() if p["metadata"]["name"].startswith("web-"))
    name = f"default/{running['metadata']['name']}"
    assert main(["explain", "pod", name]) == 0
    assert f"pod {name} is bound to node {running['spec']['nodeName']}" in capsys.readouterr().out
    assert main(["explain", "pod", "default/nope"]) == 2
    assert "not found" in capsys.readouterr().err


def test_age_reads_like_kubectl() -> None:
    assert [age(s) for s in (5, 119, 600, 3 * 3600 + 20 * 60, 30 * 3600, 12 * 86400)] == [
        "5s",
        "119s",
        "10m",
        "3h20m",
        "1d6h",
        "12d",
    ]


@pytest.mark.parametrize(
    "argv",
    [["doctor"], ["status"], ["explain"], ["explain", "pod"], ["explain", "node"], ["simulate"], ["plan"]],
)
def test_every_command_help_shows_an_example(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    assert "example" in capsys.readouterr().out
