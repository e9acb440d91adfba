"""The disruption function under its own role (issue 17's found defect).

On AWS every disruption pass failed: resolving an EC2NodeClass with ``spec.role`` (Karpenter's
getting-started form) read its instance profile (``iam:GetInstanceProfile``) and, before the provisioner
had made it, created it, neither of which the disruption role was granted; the ``ClientError`` was not
caught, so no emptiness, consolidation, drift or expiration ever ran. The simulated cloud answered every
call whatever the caller's role, so nothing showed it. Disruption now names the profile without IAM calls
(it launches nothing), and a refused call fails one node class, not the pass.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from serverless_karpenter.cache import RESOLUTION_TTL as RESOLVE_TTL
from serverless_karpenter_sim.simulation import Simulation

from tests.builders import deployment, nodeclass, nodepool
from tests.integration.simulate import simulation
from tests.integration.test_iam_enforcement import without

pytestmark = pytest.mark.integration

NOT_READY = "EC2NodeClass not ready"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    scenario = {"name": "iam-disruption", "manifests": [nodepool(), nodeclass(), deployment("web", 2)]}
    sim = simulation(tmp_path_factory.mktemp("iam-disruption"), scenario)
    sim.start()
    try:
        sim.run_for(90)  # a node launched for the pods: the provisioner made the node class's profile
        assert sim.plane.store.list_live(), "the provisioner launched nothing"
        yield sim
    finally:
        sim.stop()


def disruption_pass(sim: Simulation) -> tuple[dict[str, object], str]:
    """One disruption invocation resolving the node classes itself (the resolver's cache, shared in the
    simulator with the provisioner, expired first), and what it logged."""
    sim.clock.advance(RESOLVE_TTL.total_seconds() + 1)
    mark = len(sim.lambdas.log.getvalue())
    result = sim.lambdas.invoke("disruption", {"source": "aws.scheduler"})
    return result, sim.lambdas.log.getvalue()[mark:]


def test_a_disruption_pass_resolves_a_node_class_with_spec_role(sim: Simulation) -> None:
    assert nodeclass()["spec"].get("role"), "the getting-started EC2NodeClass names a role"
    result, log = disruption_pass(sim)
    assert result["leader"] is True
    assert NOT_READY not in log, log
    assert not sim.lambdas.errors


def test_a_refused_call_for_a_node_class_does_not_abort_the_pass(sim: Simulation) -> None:
    with without(sim, "disruption", "AllowRegionalReadActions"):
        result, log = disruption_pass(sim)
    assert result["leader"] is True, "the pass ran to the end"
    assert NOT_READY in log and "failed (UnauthorizedOperation)" in log, log
    assert not sim.lambdas.errors
