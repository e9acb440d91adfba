"""kubectl, the real binary, against the simulator: HTTPS with the generated kubeconfig (so it sends its
bearer token and verifies the server), `apply` with validation on (the server's, found through
/openapi/v3), `get` in the server's Table columns, and `drain` through the Eviction API.

kubectl is on the PATH here and in CI; these tests fail, not skip, without it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from serverless_karpenter.clock import ManualClock
from serverless_karpenter_sim.kubeapi import KubeApiServer
from serverless_karpenter_sim.kubeapi.kubeconfig import write_kubeconfig
from serverless_karpenter_sim.scenario import load_scenario
from serverless_karpenter_sim.simulation import Simulation

from tests.builders import deployment
from tests.integration.simulate import simulation

pytestmark = pytest.mark.integration

KUBECTL_TIMEOUT = 120.0


def kubectl_binary() -> str:
    binary = shutil.which("kubectl")
    assert binary is not None, "kubectl must be on the PATH for these tests"
    return binary


def kubectl(kubeconfig: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(kubeconfig.parent)}
    result = subprocess.run(
        [kubectl_binary(), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=KUBECTL_TIMEOUT,
        check=False,
    )
    if check:
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result


def header(output: str) -> list[str]:
    return output.splitlines()[0].split()


def rows(output: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split() for line in output.splitlines()[1:]}


def getting_started(path: Path) -> Path:
    """Karpenter's getting-started NodePool and EC2NodeClass (the default scenario's, for this cluster)."""
    path.write_text(yaml.safe_dump_all(load_scenario("default").manifests[:2], sort_keys=False))
    return path


def drain_while_simulating(sim: Simulation, kubeconfig: Path, node: str) -> subprocess.CompletedProcess[str]:
    """Run `kubectl drain` while the simulation goes on: the evicted pods' kubelet finishes them in virtual
    time, which only passes as the simulation ticks."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(kubeconfig.parent)}
    args = ["drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=90s"]
    with subprocess.Popen(
        [kubectl_binary(), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        while process.poll() is None:
            sim.tick()
        stdout, stderr = process.communicate()
    return subprocess.CompletedProcess(args, process.returncode, stdout, stderr)


def test_kubectl_applies_lists_and_drains_against_the_simulation(tmp_path: Path) -> None:
    sim = simulation(tmp_path, {"name": "kubectl", "manifests": []})
    try:
        sim.start()
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", sim.kube_server, sim.cluster_name)
        assert sim.kube_server.url.startswith("https://127.0.0.1:")

        applied = kubectl(kubeconfig, "apply", "-f", str(getting_started(tmp_path / "getting-started.yaml")))
        assert "nodepool.karpenter.sh/default created" in applied.stdout
        assert "ec2nodeclass.karpenter.k8s.aws/default created" in applied.stdout
        workload = tmp_path / "inflate.yaml"
        workload.write_text(yaml.safe_dump(deployment("inflate", 3)))
        assert "deployment.apps/inflate created" in kubectl(kubeconfig, "apply", "-f", str(workload)).stdout
        # Applied again: the server's copy is the one last applied, so nothing changes.
        assert "unchanged" in kubectl(kubeconfig, "apply", "-f", str(workload)).stdout

        sim.run_for(150)

        nodes = kubectl(kubeconfig, "get", "nodes").stdout
        assert header(nodes) == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
        node_rows = rows(nodes)
        assert node_rows and all(row[1] == "Ready" and row[2] == "<none>" for row in node_rows.values())

        pods = kubectl(kubeconfig, "get", "pods", "-o", "wide").stdout
        assert header(pods)[:7] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
        assert len(rows(pods)) == 3 and all(row[1:3] == ["1/1", "Running"] for row in rows(pods).values())

        nodepools = kubectl(kubeconfig, "get", "nodepools").stdout
        assert header(nodepools) == ["NAME", "NODECLASS", "NODES", "READY", "AGE"]
        assert rows(nodepools)["default"][1] == "default"
        nodeclasses = kubectl(kubeconfig, "get", "ec2nodeclasses", "-o", "wide").stdout
        assert header(nodeclasses) == ["NAME", "READY", "AGE", "ROLE"]
        assert rows(nodeclasses)["default"][-1] == f"KarpenterNodeRole-{sim.cluster_name}"

        node = next(iter(node_rows))
        on_node = [p for p in sim.kube.list_pods() if p["spec"].get("nodeName") == node]
        assert on_node, "the drained node runs some of the workload"
        drained = drain_while_simulating(sim, kubeconfig, node)
        assert drained.returncode == 0, drained.stderr
        assert f"node/{node} cordoned" in drained.stdout and f"node/{node} drained" in drained.stdout
        assert all(f"pod/{p['metadata']['name']} evicted" in drained.stdout for p in on_node)
        assert {r.pod for r in sim.kube_server.audit.evictions} >= {p["metadata"]["name"] for p in on_node}
        after = rows(kubectl(kubeconfig, "get", "nodes").stdout)
        assert after[node][1] == "Ready,SchedulingDisabled"
    finally:
        sim.stop()


def test_kubectl_validation_flags_an_unknown_field(tmp_path: Path) -> None:
    with KubeApiServer(ManualClock()) as server:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server, "sim")
        manifests = load_scenario("default").manifests[:2]
        manifests[0]["spec"]["template"]["spec"]["nodeClassRf"] = {"name": "default"}
        path = tmp_path / "typo.yaml"
        path.write_text(yaml.safe_dump_all(manifests, sort_keys=False))

        refused = kubectl(kubeconfig, "apply", "-f", str(path), check=False)

        assert refused.returncode != 0
        assert 'strict decoding error: unknown field "spec.template.spec.nodeClassRf"' in refused.stderr
        assert "ec2nodeclass.karpenter.k8s.aws/default created" in refused.stdout
        assert kubectl(kubeconfig, "get", "nodepools", check=False).stdout == ""
        # Warn writes, and says what it would have refused.
        warned = kubectl(kubeconfig, "apply", "--validate=warn", "-f", str(path))
        assert 'Warning: unknown field "spec.template.spec.nodeClassRf"' in warned.stderr
