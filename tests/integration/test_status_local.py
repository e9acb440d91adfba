"""`simulate --keep` leaves an environment that `status --local` and `doctor --local` use from scratch:
a control plane built from `.serverless-karpenter/local-env`, as another process would build it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from serverless_karpenter.doctor.checks import CheckId
from serverless_karpenter.runtime import installed_control_plane, use_control_plane
from serverless_karpenter_cli.connection import LOCAL_ENV, read_local_env, write_local_env
from serverless_karpenter_cli.main import main
from serverless_karpenter_sim.simulation import keep_environment

from tests.builders import deployment, nodeclass, nodepool
from tests.integration.simulate import simulation

pytestmark = pytest.mark.integration


def test_status_and_doctor_against_a_kept_simulation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sim = simulation(tmp_path, {"name": "kept", "manifests": [nodepool(), nodeclass(), deployment("web", 2)]})
    try:
        sim.start()
        sim.run_for(150)
        monkeypatch.chdir(tmp_path)
        path = write_local_env(keep_environment(sim))
        assert path == LOCAL_ENV and read_local_env()["CLUSTER_NAME"] == sim.cluster_name
        use_control_plane(None)  # as a separate process: nothing installed

        assert main(["status", "--local", "--json"]) == 0
        report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert installed_control_plane() is not sim.plane
        assert {c["name"] for c in report["nodeclaims"]} == {r.name for r in sim.plane.store.list()}
        assert report["pending_pods"] == [] and report["cost_per_hour"] > 0

        code = main(["doctor", "--local", "--json"])
        checks = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["checks"]
        # The kept simulator is set up as the stack expects: every check runs, and passes.
        assert code == 0 and [c for c in checks if c["status"] != "ok"] == []
        assert {c["check"] for c in checks} == {c.value for c in CheckId}
    finally:
        sim.stop()


def test_local_without_a_kept_simulation_says_how(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    use_control_plane(None)
    assert main(["status", "--local"]) == 2
    assert "simulate --keep" in capsys.readouterr().err
