"""`doctor` on Karpenter itself in the cluster (issue 21): its CRDs serve what we write, and a Karpenter
controller still running next to us fails with "two controllers would fight: scale it to zero"."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from tests.integration.doctor_setup import DoctorSetup, only_failure, run_doctor, start_correct_setup

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def setup() -> Iterator[DoctorSetup]:
    yield from start_correct_setup()


def karpenter_deployment(replicas: int) -> dict[str, object]:
    """Karpenter's controller as its Helm chart installs it (labels and image)."""
    labels = {"app.kubernetes.io/name": "karpenter", "app.kubernetes.io/instance": "karpenter"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "karpenter", "namespace": "kube-system", "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {"name": "controller", "image": "public.ecr.aws/karpenter/controller:1.14.1"}
                    ]
                },
            },
        },
    }


def test_the_crds_serve_what_we_write(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    code, checks = run_doctor(capsys)
    assert code == 0, [c for c in checks if c["status"] == "fail"]
    crds = [c for c in checks if c["check"] == "karpenter-crds"]
    assert all(c["status"] == "ok" for c in crds)
    summaries = " | ".join(c["summary"] for c in crds)
    for name, version in (
        ("nodepools.karpenter.sh", "karpenter.sh/v1"),
        ("nodeclaims.karpenter.sh", "karpenter.sh/v1"),
        ("ec2nodeclasses.karpenter.k8s.aws", "karpenter.k8s.aws/v1"),
    ):
        assert f"({name}) serves {version} with /status" in summaries
    [in_cluster] = [c for c in checks if c["check"] == "in-cluster-karpenter"]
    assert (in_cluster["status"], in_cluster["summary"]) == ("ok", "no in-cluster Karpenter runs")


def test_a_running_karpenter_controller_fails_until_scaled_to_zero(
    setup: DoctorSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    apps = k8s.AppsV1Api(setup.sim.api_client)
    apps.create_namespaced_deployment("kube-system", karpenter_deployment(2))
    try:
        code, checks = run_doctor(capsys)
        failure = only_failure(checks, "in-cluster-karpenter")
        assert code == 1
        assert "Deployment kube-system/karpenter has 2 replica(s)" in failure["summary"]
        assert "two controllers would fight: scale it to zero" in failure["summary"]
        assert failure["fix"].startswith("kubectl scale deployment karpenter -n kube-system --replicas=0")

        apps.patch_namespaced_deployment_scale("karpenter", "kube-system", {"spec": {"replicas": 0}})
        code, checks = run_doctor(capsys)
        assert code == 0
        [in_cluster] = [c for c in checks if c["check"] == "in-cluster-karpenter"]
        assert in_cluster["summary"] == "Karpenter's Deployment kube-system/karpenter is scaled to zero"
    finally:
        apps.delete_namespaced_deployment("karpenter", "kube-system")
