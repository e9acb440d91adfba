"""`simulate --keep --detach` writes a kubeconfig for the kept simulator and prints the line that points
kubectl at it; `simulate --stop` takes it away with the simulator."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from serverless_karpenter.adapters import aws
from serverless_karpenter.runtime import use_control_plane
from serverless_karpenter_cli import simulate
from serverless_karpenter_cli.connection import LOCAL_ENV, read_local_env
from serverless_karpenter_cli.main import main

from tests.builders import deployment, nodeclass, nodepool
from tests.integration.simulate import write_scenario

pytestmark = pytest.mark.integration


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh directory; the simulator kept there is stopped afterwards, whatever the test did."""
    monkeypatch.chdir(tmp_path)
    environ = dict(os.environ)
    use_control_plane(None)
    try:
        yield tmp_path
    finally:
        main(["simulate", "--stop"])
        os.environ.clear()
        os.environ.update(environ)
        aws.reset_sessions()


def test_kept_simulator_is_reachable_by_kubectl_through_the_printed_kubeconfig(workdir: Path) -> None:
    kubectl = shutil.which("kubectl")
    assert kubectl is not None, "kubectl must be on the PATH for this test"
    manifests = [nodepool(), nodeclass(), deployment("web", 1)]
    scenario = write_scenario(workdir, {"name": "kept-kubectl", "manifests": manifests, "steps": []})
    cli = [sys.executable, "-m", "serverless_karpenter_cli.main", "simulate", "--scenario", str(scenario)]
    done = subprocess.run(
        [*cli, "--keep", "--detach"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=simulate.READY_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    exported = re.search(r"^\s*export KUBECONFIG=(\S+)$", done.stdout + done.stderr, re.MULTILINE)
    assert exported is not None, done.stdout + done.stderr
    kubeconfig = Path(exported[1])
    assert kubeconfig == (workdir / simulate.KUBECONFIG).resolve() and kubeconfig.stat().st_mode & 0o077 == 0
    assert read_local_env()["KUBECONFIG"] == str(kubeconfig)

    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(workdir)}
    nodes = subprocess.run(
        [kubectl, "get", "nodes"], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert nodes.returncode == 0, nodes.stderr
    assert nodes.stdout.split("\n")[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert len(nodes.stdout.strip().splitlines()) >= 2

    assert main(["simulate", "--stop"]) == 0
    assert not kubeconfig.exists() and not LOCAL_ENV.exists()
