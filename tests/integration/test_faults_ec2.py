"""EC2 faults: no capacity for chosen offerings, RequestLimitExceeded bursts, partial and lost fleet
answers, and an instance that dies while pending. Every armed fault fires, and the invariants hold after
every step and at the end."""

from __future__ import annotations

from pathlib import Path

import pytest
from serverless_karpenter.api import labels as wk
from serverless_karpenter_sim.scenario import load_scenario
from serverless_karpenter_sim.simulation import Schedule, Simulation

from tests.builders import deployment, nodeclass, nodepool
from tests.integration.simulate import run_checked, write_scenario

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _short_gc_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    # The leaked instance of a lost CreateFleet answer must be collected within the test's virtual time.
    monkeypatch.setenv("GARBAGE_COLLECTION_GRACE_SECONDS", "120")


def test_ec2_faults_leave_no_leak_and_every_pod_running(tmp_path: Path) -> None:
    scenario = {
        "name": "faults-ec2",
        "manifests": [nodepool(), nodeclass(), deployment("web", 6)],
        "steps": [
            # The cheapest offering the claim would get has no capacity anywhere for a while.
            {"fault": {"ec2": "insufficient-capacity", "instance_types": ["c6a.2xlarge"], "times": None}},
            {"fault": {"ec2": "request-limit", "operation": "CreateFleet", "times": 2}},
            {"fault": {"ec2": "lost-response"}},
            {"fault": {"ec2": "dies-pending"}},
            {"fault": {"ec2": "partial-fleet"}},
            {"wait": "60s"},
            {"fault": {"ec2": "request-limit", "operation": "DescribeInstances", "times": 3}},
            {"scale": {"deployment": "web", "replicas": 14}},
            {"wait": "5m"},
        ],
    }
    sim = Simulation(
        load_scenario(str(write_scenario(tmp_path, scenario))),
        schedule=Schedule(tick_seconds=2.0, watcher_every=2.0),
    )

    def inspect(sim: Simulation) -> None:
        instances = sim.plane.launcher.instances(include_terminated=True)
        # The instance whose CreateFleet answer was lost and the one that died pending are both gone.
        assert sum(1 for i in instances if i.state in ("terminated", "shutting-down")) >= 2
        live = [i for i in instances if i.state not in ("terminated", "shutting-down")]
        assert all(i.instance_type != "c6a.2xlarge" for i in live)
        records = {r.name for r in sim.plane.store.list() if r.state != "Terminated"}
        assert sorted(i.tags[wk.NODECLAIM] for i in live) == sorted(records)

    report = run_checked(sim, inspect)
    assert not sim.faults.unfired(), sim.faults.armed_faults()
    injected = sim.faults.injected
    for kind in ("insufficient-capacity", "request-limit", "lost-response", "dies-pending", "partial-fleet"):
        assert injected[f"ec2/{kind}"] >= 1, kind
    assert report["pods"]["pending"] == 0 and report["pods"]["running"] == 14
