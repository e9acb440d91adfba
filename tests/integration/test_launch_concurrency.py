"""Two provisioner invocations at once on the same pending pods: the DynamoDB lease lets one launch and
the other exit, so exactly one set of instances is launched."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from serverless_karpenter.adapters.state_store import Lease
from serverless_karpenter.api import labels as wk
from serverless_karpenter.provisioning.usecases import LEASE_NAME, ProvisionerRun, run_provisioner
from serverless_karpenter.runtime import build_control_plane
from serverless_karpenter.scheduling import pods as podlib

from tests.builders import deployment, nodeclass, nodepool
from tests.integration.simulate import simulation

pytestmark = pytest.mark.integration


def test_concurrent_provisioners_launch_one_set_of_instances(tmp_path: Path) -> None:
    sim = simulation(
        tmp_path, {"name": "concurrent", "manifests": [nodepool(), nodeclass(), deployment("web", 6)]}
    )
    try:
        sim.start()
        resources = sim.resources
        assert resources is not None
        for _ in range(3):  # Deployment -> ReplicaSet -> pods, then kube-scheduler finds no node for them
            sim.controllers.step(sim.clock.now())
            sim.scheduler.step(sim.clock.now())
        pending = [p for p in sim.kube.list_pending_pods() if podlib.is_provisionable(p)]
        assert len(pending) == 6

        # Two Lambdas: each its own control plane and lease holder, one table.
        planes = {"a": sim.plane, "b": build_control_plane(sim.settings, sim.clock)}
        a_is_launching = threading.Event()
        b_finished = threading.Event()

        def hold_a_inside_create_fleet(**_: Any) -> None:
            if threading.current_thread().name == "a":
                a_is_launching.set()
                b_finished.wait(timeout=30)

        for plane in planes.values():
            plane.launcher.ec2.meta.events.register("before-call.ec2.CreateFleet", hold_a_inside_create_fleet)
        runs: dict[str, ProvisionerRun] = {}
        errors: list[BaseException] = []

        def invoke(holder: str) -> None:
            try:
                lease = Lease(sim.cloud.client("dynamodb"), resources.table_name, LEASE_NAME, holder=holder)
                runs[holder] = run_provisioner(planes[holder], lease)
            except BaseException as error:  # surfaced below
                errors.append(error)
            finally:
                if holder == "b":
                    b_finished.set()

        a = threading.Thread(target=invoke, args=("a",), name="a")
        b = threading.Thread(target=invoke, args=("b",), name="b")
        a.start()
        assert a_is_launching.wait(timeout=30)
        b.start()  # while a holds the lease, mid-launch
        b.join(timeout=60)
        a.join(timeout=60)
        assert not errors, errors
        assert runs["a"].leader and runs["a"].provisioning.launched
        assert not runs["b"].leader and not runs["b"].provisioning.launched

        instances = sim.plane.launcher.instances()
        claims = sorted(i.tags[wk.NODECLAIM] for i in instances)
        assert claims == sorted(runs["a"].provisioning.launched)
        assert len(claims) == len(set(claims))

        # The lease is free again; a later invocation sees the in-flight claims and launches nothing more.
        later = Lease(sim.cloud.client("dynamodb"), resources.table_name, LEASE_NAME, holder="c")
        again = run_provisioner(planes["b"], later)
        assert again.leader and not again.provisioning.launched
        assert len(sim.plane.launcher.instances()) == len(claims)
    finally:
        sim.stop()
