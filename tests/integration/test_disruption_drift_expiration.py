"""Drift (a new AMI for the alias) and expiration (expireAfter) end to end on the simulator."""

from __future__ import annotations

import pytest
from serverless_karpenter import amifamily
from serverless_karpenter_sim.cloud import KUBERNETES_VERSION

from tests.integration.disruption_helpers import active, running, running_pods, scenario

pytestmark = pytest.mark.integration


def test_new_ami_for_the_alias_replaces_every_node_within_the_budget() -> None:
    with running(scenario("drift-ami"), tick_seconds=10) as (sim, watch):
        for step in sim.scenario.steps:
            sim.run_step(step)
        original = {r.name: r for r in active(sim)}
        assert len(original) >= 2
        old_ami = next(iter(original.values())).image_id
        images = sim.ec2.describe_images(
            Owners=["amazon"],
            Filters=[{"Name": "name", "Values": ["amzn2*"]}, {"Name": "architecture", "Values": ["x86_64"]}],
        )["Images"]
        new_ami = next(i["ImageId"] for i in images if i["ImageId"] != old_ami)
        parameter = amifamily.ssm_parameter_for_alias("al2023", "latest", KUBERNETES_VERSION, "amd64")
        sim.cloud.publish_public_parameter(parameter, new_ami)
        published_at = sim.elapsed

        for _ in range(30):
            sim.run_for(60)
            now_active = active(sim)
            if not set(original) & {r.name for r in now_active} and all(
                r.image_id == new_ami for r in now_active
            ):
                break
        now_active = active(sim)
        assert not set(original) & {r.name for r in now_active}, "every drifted node was replaced"
        assert all(r.image_id == new_ami for r in now_active)
        # The last drifted node may still be draining, one pod at a time under the budget: let it finish.
        for _ in range(10):
            if running_pods(sim) == 9 and not any(r.is_deleting for r in sim.plane.store.list_live()):
                break
            sim.run_for(30)
        assert all(watch.disrupting_at[name] > published_at for name in original)
        # Replacements come first: each old node drains only after some replacement is initialized.
        replacements = watch.replacements()
        assert replacements
        first_ready = min(watch.initialized_at[r.name] for r in replacements)
        assert min(watch.disrupting_at[name] for name in original) >= first_ready
        # The default budget (10%, rounded up) disrupts one node at a time.
        assert watch.max_deleting == 1
        assert running_pods(sim) == 9
        assert sim.kube_server.audit.pdb_violations == 0


def test_expire_after_one_hour_replaces_nodes_after_one_virtual_hour() -> None:
    with running(scenario("expiration"), tick_seconds=15) as (sim, watch):
        sim.run_for(10 * 60)
        original = {r.name: r for r in active(sim)}
        assert original
        sim.run_for(50 * 60 - 60)
        assert set(original) <= {r.name for r in active(sim)}, "nothing expires before an hour"
        sim.run_for(12 * 60)
        now_active = active(sim)
        assert not set(original) & {r.name for r in now_active}
        assert now_active, "the pods moved to fresh capacity"
        for name, record in original.items():
            age = watch.disrupting_at[name] - (record.created_at - sim.start_time).total_seconds()
            assert 3600 <= age <= 3600 + 120
        assert running_pods(sim) == 6
        assert sim.kube_server.audit.pdb_violations == 0
