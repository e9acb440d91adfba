"""The doctor's checks on Karpenter's CRDs and on an in-cluster Karpenter controller (issue 21)."""

from __future__ import annotations

from serverless_karpenter.doctor.checks import Status
from serverless_karpenter.doctor.karpenter import (
    ControllerFacts,
    CrdFacts,
    KarpenterFacts,
    check_crds,
    check_in_cluster_karpenter,
)

REQUIRED = ("nodepools.karpenter.sh", "nodeclaims.karpenter.sh", "ec2nodeclasses.karpenter.k8s.aws")


def installed(**changes: CrdFacts | None) -> KarpenterFacts:
    crds: dict[str, CrdFacts] = {name: CrdFacts(name, ["v1"], ["v1"], "v1") for name in REQUIRED}
    for key, value in changes.items():
        name = {"nodepools": REQUIRED[0], "nodeclaims": REQUIRED[1], "ec2nodeclasses": REQUIRED[2]}[key]
        if value is None:
            crds.pop(name)
        else:
            crds[name] = value
    return KarpenterFacts(crds=crds)


def failures(facts: KarpenterFacts) -> list[str]:
    return [r.summary for r in check_crds(facts) if r.status == Status.FAIL]


def test_v1_crds_with_status_stored_as_v1_pass_and_the_optional_overlay_may_be_missing() -> None:
    results = check_crds(installed())
    assert all(r.status == Status.OK for r in results)
    assert any(
        "NodeOverlay CRD (nodeoverlays.karpenter.sh) is not installed (optional" in r.summary for r in results
    )


def test_unreadable_discovery_is_could_not_run_never_a_pass() -> None:
    [result] = check_crds(KarpenterFacts(crds_unknown="API discovery could not be read (503)"))
    assert result.status == Status.SKIPPED


def test_a_missing_crd_fails_with_how_to_apply_ours() -> None:
    [result] = [r for r in check_crds(installed(nodeclaims=None)) if r.status == Status.FAIL]
    assert result.summary.startswith("NodeClaim CRD (nodeclaims.karpenter.sh) is not installed")
    assert "deploy/crds" in result.fix


def test_versions_status_and_storage_that_do_not_serve_what_we_write_fail() -> None:
    beta = CrdFacts(REQUIRED[0], ["v1beta1"], ["v1beta1"], "v1beta1")
    assert failures(installed(nodepools=beta)) == [
        "NodePool CRD (nodepools.karpenter.sh) serves v1beta1 but not v1: we read and write karpenter.sh/v1"
    ]
    no_status = CrdFacts(REQUIRED[2], ["v1"], [], "v1")
    assert "without a /status subresource" in failures(installed(ec2nodeclasses=no_status))[0]
    stored_beta = CrdFacts(REQUIRED[0], ["v1", "v1beta1"], ["v1", "v1beta1"], "v1beta1")
    [stored] = failures(installed(nodepools=stored_beta))
    assert "stores v1beta1" in stored and "conversion webhook" in stored
    # Where the CRD objects may not be read, discovery alone decides, and says so.
    unknown = CrdFacts(REQUIRED[0], ["v1"], ["v1"], None, "the CRD object could not be read (403)")
    [ok] = [r for r in check_crds(installed(nodepools=unknown)) if "nodepools" in r.summary]
    assert ok.status == Status.OK and "storage version unknown" in ok.summary


def test_a_running_controller_or_its_pods_fail_and_one_scaled_to_zero_passes() -> None:
    running = KarpenterFacts(controllers=[ControllerFacts("karpenter", "karpenter", 2, 2)])
    [result] = check_in_cluster_karpenter(running)
    assert result.status == Status.FAIL
    assert "two controllers would fight: scale it to zero" in result.summary
    assert result.fix.startswith("kubectl scale deployment karpenter -n karpenter --replicas=0")
    scaled = KarpenterFacts(controllers=[ControllerFacts("karpenter", "karpenter", 0, 0)])
    assert [r.status for r in check_in_cluster_karpenter(scaled)] == [Status.OK]
    leftover = KarpenterFacts(controllers=scaled.controllers, pods=["karpenter/karpenter-abc"])
    [pods] = check_in_cluster_karpenter(leftover)
    assert pods.status == Status.FAIL and "karpenter/karpenter-abc" in pods.summary
    unreadable = KarpenterFacts(controllers_unknown="Deployments and pods could not be listed (403)")
    assert [r.status for r in check_in_cluster_karpenter(unreadable)] == [Status.SKIPPED]
