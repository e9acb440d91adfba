"""The local end-to-end simulation: our Lambdas against moto and the simulated cluster, on virtual time."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from kubernetes import client as k8s
from kubernetes import utils as k8s_utils
from serverless_karpenter import crashpoints
from serverless_karpenter.adapters import aws
from serverless_karpenter.adapters.kubernetes import KubernetesGateway
from serverless_karpenter.api import labels as wk
from serverless_karpenter.catalog import load_bundled_catalog
from serverless_karpenter.clock import ManualClock
from serverless_karpenter.config import Settings
from serverless_karpenter.disruption.usecases import disruption_outstanding
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.observability import NAMESPACE
from serverless_karpenter.runtime import build_control_plane, use_control_plane
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter.scheduling.gc_pause import gc_paused
from serverless_karpenter.scheduling.resources import format_quantity

from serverless_karpenter_sim.cloud import REGION, CloudResources, SimulatedCloud, seed_stack
from serverless_karpenter_sim.cloud_instances import MotoInstances
from serverless_karpenter_sim.cluster import KubeletFleet, NodeShape, WorkloadControllers
from serverless_karpenter_sim.cluster import Scheduler as KubeScheduler
from serverless_karpenter_sim.cluster_access import apply_rbac, component_clients, grant_cluster_access
from serverless_karpenter_sim.eks_authn import EksTokenAuthenticator, aws_auth_reader
from serverless_karpenter_sim.faults import FaultInjector
from serverless_karpenter_sim.invariants import InvariantReport, Invariants
from serverless_karpenter_sim.karpenter_world import karpenter_world
from serverless_karpenter_sim.kubeapi import KubeApiServer
from serverless_karpenter_sim.lambda_credentials import CallerCredentials, function_credentials
from serverless_karpenter_sim.lambdas import InProcessInvoker, LambdaRuntime
from serverless_karpenter_sim.record_view import RecordView
from serverless_karpenter_sim.scenario import Scenario, Step
from serverless_karpenter_sim.scenario_steps import ec2_action, patch_object, publish_ami

KARPENTER_PLURALS = {
    ("karpenter.sh", "NodePool"): ("v1", "nodepools"),
    ("karpenter.sh", "NodeOverlay"): ("v1alpha1", "nodeoverlays"),
    ("karpenter.k8s.aws", "EC2NodeClass"): ("v1", "ec2nodeclasses"),
}
# A claim in these is not looked at again; DELETED marks one whose record was deleted.
DELETED = "Deleted"
FINAL_STATES = frozenset({NodeClaimState.TERMINATED.value, DELETED})
_REFERENCE = re.compile(r"\$\{(instance|node):(\d+)\}")


@dataclass
class Schedule:
    """How often the simulator's loop emulates each trigger the stack wires up."""

    tick_seconds: float = 1.0
    # A turn of the watcher's watch every virtual second, when its loop wakes the batcher while pods are
    # pending. A turn after the last invocation's watch ended starts the next invocation (its LIST).
    watcher_every: float = 1.0
    provisioner_every: float = 60.0  # the EventBridge schedule
    termination_every: float = 5.0  # delayed termination-work messages while drains are under way
    # The disruption function loops within its invocation, a pass every 10 s or sooner when something
    # falls due, and ends when idle (the schedule's next invocation comes within a minute); the simulator
    # runs one pass an invocation and schedules the next as the loop would (``nextPassSeconds``),
    # falling back to this period when an invocation fails.
    disruption_every: float = 10.0
    boot_delay: float = 30.0
    ready_delay: float = 10.0


@dataclass
class TimelineEntry:
    t: float
    what: str


@dataclass
class SimulationReport:
    scenario: str
    virtual_seconds: float
    pods: dict[str, int]
    nodeclaims: list[dict[str, Any]]
    instances: dict[str, int]
    cost_per_hour: float
    events_handled: int
    dlq_messages: int
    timeline: list[TimelineEntry] = field(default_factory=list)
    lambda_invocations: dict[str, int] = field(default_factory=dict)
    lambda_errors: dict[str, int] = field(default_factory=dict)
    pdb_violations: int = 0
    invariants: InvariantReport | None = None
    faults_injected: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "invariants": self.invariants.to_json() if self.invariants else None,
            "faults_injected": self.faults_injected,
            "scenario": self.scenario,
            "virtual_seconds": self.virtual_seconds,
            "pods": self.pods,
            "nodeclaims": self.nodeclaims,
            "instances": self.instances,
            "cost_per_hour": self.cost_per_hour,
            "events_handled": self.events_handled,
            "dlq_messages": self.dlq_messages,
            "pdb_violations": self.pdb_violations,
            "lambda_invocations": self.lambda_invocations,
            "lambda_errors": self.lambda_errors,
            "timeline": [{"t": e.t, "what": e.what} for e in self.timeline],
        }


def catalog_shapes(region: str) -> Callable[[str], NodeShape]:
    """What a booted instance reports to its kubelet: capacity and allocatable of its type."""
    catalog = load_bundled_catalog(region)

    def shape(instance_type: str) -> NodeShape:
        it = catalog[instance_type]
        return NodeShape(
            capacity={k: format_quantity(k, v) for k, v in it.capacity.items()},
            allocatable={k: format_quantity(k, v) for k, v in it.allocatable.items()},
            labels=dict(it.labels),
        )

    return shape


class Simulation:
    def __init__(
        self,
        scenario: Scenario,
        *,
        schedule: Schedule | None = None,
        log: TextIO | None = None,
        on_tick: Callable[[Simulation], None] | None = None,
    ) -> None:
        self.scenario = scenario
        self.schedule = schedule or Schedule()
        # Virtual time starts at the wall clock's now, so timestamps moto makes are never in its future.
        self.start_time = datetime.now(UTC).replace(microsecond=0)
        self.clock = ManualClock(self.start_time)
        self.cluster_name = scenario.cluster_name
        self.cloud = SimulatedCloud(self.cluster_name, self.clock)
        self.kube_server = KubeApiServer(self.clock)
        self.faults = FaultInjector(self)
        self.lambdas = LambdaRuntime(
            self.cluster_name, self.clock, log, faults_taken_effect=self.faults.taken_effect
        )
        self.timeline: list[TimelineEntry] = []
        self.events_handled = 0
        self.launch_order: list[str] = []  # nodeclaim names in launch order
        self._on_tick = on_tick
        self._last_run: dict[str, float] = {}
        self._next_disruption = 0.0
        self._outstanding: str | None = None
        self._states: dict[str, str] = {}
        self._started = False
        self.resources: CloudResources | None = None
        self.invariants = Invariants(self)

    # -- set-up --------------------------------------------------------------------------------------

    @property
    def elapsed(self) -> float:
        return (self.clock.now() - self.start_time).total_seconds()

    @property
    def interruption_visibility_timeout(self) -> int:
        """Seconds of virtual time a received interruption message stays hidden, unless the handler shortens
        it, before SQS delivers it again."""
        assert self.resources is not None, "start the simulation first"
        return self.resources.queue_visibility_timeout

    def note(self, what: str) -> None:
        self.timeline.append(TimelineEntry(round(self.elapsed, 1), what))

    def start(self) -> None:
        self.resources = res = self.cloud.start()
        # The stack as deployed: each function with its own role and the stack's policies on it; every
        # call a function makes signs as its role (issue 17).
        self.stack = seed_stack(self.cloud)
        self.lambdas.credentials = function_credentials(self.cloud, self.stack)
        aws.use_credentials(CallerCredentials(self.lambdas.credentials))
        url = self.kube_server.start()
        self.cloud.serve_cluster_endpoint(url, self.kube_server.authority.ca_data)
        eks_authenticator = EksTokenAuthenticator(
            self.cluster_name, REGION, aws_auth_reader(self.kube_server.store)
        )
        self.kube_server.access.use_webhook(eks_authenticator, eks_authenticator.authorizes)
        clients = component_clients(self.kube_server)
        self.api_client = clients["driver"]  # the scenario driver: the cluster's admin
        apply_rbac(self.api_client)
        env = {
            "CLUSTER_NAME": self.cluster_name,
            "STATE_TABLE_NAME": res.table_name,
            "INTERRUPTION_QUEUE_URL": res.queue_url,
            "INTERRUPTION_DLQ_URL": res.dlq_url,
            "NODE_ROLE_NAME": res.node_role_name,
            "PROVISIONER_FUNCTION_NAME": f"{self.cluster_name}-provisioner",
            "POWERTOOLS_TRACE_DISABLED": "true",
            "POWERTOOLS_METRICS_NAMESPACE": NAMESPACE,
            "POWERTOOLS_SERVICE_NAME": "serverless-karpenter",
        }
        self.cloud.set_environment(dict(env))
        self.settings = Settings()
        self.kube = KubernetesGateway(
            self.api_client, self.clock, component="simulator", timeouts=self.settings.kubernetes_timeouts
        )
        # Each function's role has the access entry the stack gives it. The one control plane signs every
        # AWS call and EKS token as the function running (CallerCredentials), and as the account's
        # operator, the cluster's creator, outside any invocation (doctor, status, explain).
        for function, role in self.stack.function_roles.items():
            grant_cluster_access(self.cloud, function, role)
        # The watcher, termination and disruption wake the provisioner through Lambda; here that is an
        # in-process invocation.
        provisioner = InProcessInvoker(self._invoke, "provisioner")
        self.plane = build_control_plane(self.settings, self.clock, provisioner)
        # The loop's observers read the records once a tick, and again only after a Lambda ran.
        self.records = RecordView(
            self.cloud.client("dynamodb"),
            res.table_name,
            lambda: (self.clock.now(), sum(self.lambdas.invocations.values())),
        )
        use_control_plane(self.plane)
        ec2 = self.cloud.client("ec2")
        self.ec2 = ec2
        self.sqs = self.cloud.client("sqs")
        self.faults.hook_ledger()
        # The cluster's actors read through informers on the API server's change feed, as the real ones
        # watch; they write over HTTP as their own users.
        store = self.kube_server.store
        self.controllers = WorkloadControllers(clients["controllers"], store=store)
        self.scheduler = KubeScheduler(clients["scheduler"], store=store)
        self.kubelets = KubeletFleet(
            clients["kubelets"],
            MotoInstances(ec2, self.cluster_name, self.clock),
            catalog_shapes(REGION),
            boot_delay=self.schedule.boot_delay,
            ready_delay=self.schedule.ready_delay,
            store=store,
        )
        self._started = True
        self.note(f"cluster {self.cluster_name} up: moto at {res.endpoint_url}, kube-apiserver at {url}")
        self.apply(self.scenario.manifests)

    def stop(self) -> None:
        use_control_plane(None)
        aws.use_credentials(None)
        self.kube_server.stop()
        self.cloud.stop()
        self.lambdas.unload()

    # -- Kubernetes objects --------------------------------------------------------------------------

    def apply(self, manifests: list[dict[str, Any]]) -> None:
        custom = k8s.CustomObjectsApi(self.api_client)
        for manifest in manifests:
            group = manifest["apiVersion"].split("/")[0]
            kind = manifest["kind"]
            name = manifest.get("metadata", {}).get("name")
            if (group, kind) in KARPENTER_PLURALS:
                version, plural = KARPENTER_PLURALS[(group, kind)]
                # As `kubectl apply` sends it: an unknown field is an error, not silently dropped.
                custom.create_cluster_custom_object(
                    group, version, plural, manifest, field_validation="Strict"
                )
            else:
                k8s_utils.create_from_dict(self.api_client, manifest)
            self.note(f"applied {kind} {name}")

    def delete(self, target: dict[str, Any]) -> None:
        kind = target["kind"]
        name = self._resolve(str(target["name"]))
        namespace = target.get("namespace", "default")
        core, apps = k8s.CoreV1Api(self.api_client), k8s.AppsV1Api(self.api_client)
        match kind:
            case "Node":
                core.delete_node(name)
            case "Pod":
                core.delete_namespaced_pod(name, namespace)
            case "Deployment":
                apps.delete_namespaced_deployment(name, namespace)
            case "NodePool" | "EC2NodeClass" | "NodeOverlay":
                group = "karpenter.k8s.aws" if kind == "EC2NodeClass" else "karpenter.sh"
                version, plural = KARPENTER_PLURALS[(group, kind)]
                k8s.CustomObjectsApi(self.api_client).delete_cluster_custom_object(
                    group, version, plural, name
                )
            case _:
                raise ValueError(f"delete: kind {kind!r} is not supported by the simulator")
        self.note(f"deleted {kind} {name}")

    def scale(self, target: dict[str, Any]) -> None:
        namespace, _, name = str(target["deployment"]).rpartition("/")
        replicas = int(target["replicas"])
        k8s.AppsV1Api(self.api_client).patch_namespaced_deployment_scale(
            name, namespace or "default", {"spec": {"replicas": replicas}}
        )
        self.note(f"scaled deployment {namespace or 'default'}/{name} to {replicas}")

    # -- references --------------------------------------------------------------------------------

    def _launched(self) -> list[NodeClaimRecord]:
        by_name = {r.name: r for r in self.plane.store.list()}
        return [by_name[n] for n in self.launch_order if n in by_name]

    def _resolve(self, text: str) -> str:
        def replace(match: re.Match[str]) -> str:
            what, index = match.group(1), int(match.group(2))
            launched = self._launched()
            if index >= len(launched):
                raise ValueError(f"${{{what}:{index}}}: only {len(launched)} instance(s) launched so far")
            record = launched[index]
            value = record.instance_id if what == "instance" else record.node_name
            if not value:
                raise ValueError(f"${{{what}:{index}}}: nodeclaim {record.name} has no {what} yet")
            return value

        return _REFERENCE.sub(replace, text)

    def _resolve_all(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._resolve(value)
        if isinstance(value, list):
            return [self._resolve_all(v) for v in value]
        if isinstance(value, dict):
            return {k: self._resolve_all(v) for k, v in value.items()}
        return value

    # -- AWS-side inputs -----------------------------------------------------------------------------

    def put_event(self, event: dict[str, Any]) -> None:
        event = self._resolve_all(event)
        entry = {
            "Source": event.get("source", "aws.ec2"),
            "DetailType": event.get("detail-type", ""),
            "Detail": json.dumps(event.get("detail", {})),
            "Resources": event.get("resources", []),
            "Time": self.clock.now(),
        }
        self.cloud.client("events").put_events(Entries=[entry])
        self.note(f"event: {entry['DetailType']}")

    def send_raw(self, body: str) -> None:
        assert self.resources is not None
        self.sqs.send_message(QueueUrl=self.resources.queue_url, MessageBody=body)
        self.note("raw message sent to the interruption queue")

    def fault(self, spec: dict[str, Any]) -> None:
        """Arm a fault (see ``faults.py`` for the kinds); ``{crash: NAME}`` arms a named crash point."""
        self.note(f"fault armed: {self.faults.arm(self._resolve_all(spec))}")

    # -- the loop ------------------------------------------------------------------------------------

    def _invoke(self, name: str, event: dict[str, Any]) -> Any:
        """Invoke as the Lambda service would: a failed invocation is reported (``lambdas.failures``, which
        the invariants judge) and the loop goes on, as schedules and event sources do."""
        try:
            with self.faults.invocation(name):
                return self.lambdas.invoke(name, event)
        except crashpoints.InjectedCrash as crash:
            self.note(f"{name} crashed at {crash}")
            return None
        except Exception as error:
            self.note(f"{name} failed: {type(error).__name__}")
            return None

    def function_user(self, name: str) -> str:
        """What the API server's users of function ``name`` have in their name: its role's name (EKS maps
        the assumed role to the username)."""
        return self.stack.function_roles[name].rsplit("/", 1)[-1]

    def watch_progress(self, name: str) -> dict[str, list[int | bool]]:
        """Once the API server has written what it has to on function ``name``'s watches, how many lines
        each has written, and whether it has ended: the function reads exactly those in its turn, so a turn
        sees the same events whatever the threads' timing (``kubeapi/watches.py``)."""
        progress = self.kube_server.watches.settle(self.function_user(name))
        return {audit_id: [p.lines, p.done] for audit_id, p in progress.items()}

    def _due(self, name: str, every: float) -> bool:
        last = self._last_run.get(name)
        if last is None or self.elapsed - last >= every - 1e-9:
            self._last_run[name] = self.elapsed
            return True
        return False

    def _deliver_interruptions(self) -> None:
        """What the Lambda SQS event source does: receive a batch, with the queue's own visibility timeout,
        invoke, delete what succeeded. A failed or crashed batch's messages are left as they are: moto's
        SQS, on the simulation's clock (``cloud.sqs_on``), shows them again when their visibility ends,
        the queue's or the one the handler set."""
        assert self.resources is not None
        response = self.sqs.receive_message(
            QueueUrl=self.resources.queue_url, MaxNumberOfMessages=10, AttributeNames=["All"]
        )
        messages = response.get("Messages") or []
        if not messages:
            return
        records = [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m.get("Attributes", {}),
                "messageAttributes": {},
                "md5OfBody": m.get("MD5OfBody", ""),
                "eventSource": "aws:sqs",
                "eventSourceARN": self.resources.queue_arn,
                "awsRegion": REGION,
            }
            for m in messages
        ]
        result = self._invoke("interruption", {"Records": records})
        failed = (
            {f["itemIdentifier"] for f in (result or {}).get("batchItemFailures", [])}
            if result is not None
            else {m["MessageId"] for m in messages}
        )
        for message in messages:
            if message["MessageId"] not in failed:
                self.sqs.delete_message(
                    QueueUrl=self.resources.queue_url, ReceiptHandle=message["ReceiptHandle"]
                )
                self.events_handled += 1

    def interruption_messages_queued(self) -> int:
        """Messages on the interruption queue, visible or hidden (in flight, or waiting to be retried)."""
        assert self.resources is not None
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.resources.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return sum(int(v) for v in attributes.values())

    def tick(self) -> None:
        # The simulator's one process holds every actor's state (moto's, the API server's store, every
        # Lambda's warm globals), 1.5 GB at 1,000 nodes. A real Lambda's collector walks its own small
        # heap; here each full collection walked all of it (1.5 s for 2.6 million objects on this host),
        # charged to whichever actor was allocating: a disruption pass decoding 10,000 pods set one off
        # every few passes. Paused for the tick, what the actors allocate and drop within it is freed by
        # reference counting and never promoted; the collector runs as usual between ticks, on what
        # survived. At 1,000 nodes a steady virtual minute went from 14 to 10.4 CPU seconds.
        with gc_paused():
            self._tick()

    def _tick(self) -> None:
        now = self.clock.now()
        self.controllers.step(now)
        self.kubelets.step(now)
        self.scheduler.step(now)
        self._deliver_interruptions()
        if self._due("watcher", self.schedule.watcher_every):
            self._invoke("watcher", {"watchProgress": self.watch_progress("watcher")})
        if self._due("provisioner", self.schedule.provisioner_every):
            self._invoke("provisioner", {"source": "aws.scheduler"})
        if self._due("termination", self.schedule.termination_every):
            self._invoke("termination", {"source": "aws.scheduler"})
        if self.elapsed >= self._next_disruption - 1e-9:
            result = self._invoke("disruption", {"source": "aws.scheduler", "loopSeconds": 0})
            wait = self.schedule.disruption_every
            if isinstance(result, dict) and isinstance(result.get("nextPassSeconds"), int | float):
                wait = float(result["nextPassSeconds"])
            self._next_disruption = self.elapsed + max(wait, self.schedule.tick_seconds)
        self._observe()
        self.invariants.observe()
        if self._on_tick:
            self._on_tick(self)
        self.clock.advance(self.schedule.tick_seconds)

    def _observe(self) -> None:
        # The live records every tick, and each claim that left them once more (to see it Terminated):
        # reading the Terminated ones kept for audit every tick grew a long run's cost without end.
        records = self.records.list_live()
        live = {r.name for r in records}
        for name in [n for n, state in self._states.items() if state not in FINAL_STATES and n not in live]:
            record = self.plane.store.get(name)
            if record is None:
                self._states[name] = DELETED  # a claim deleted unlaunched is not reported, as before
            else:
                records.append(record)
        for record in records:
            previous = self._states.get(record.name)
            if previous == record.state.value:
                continue
            self._states[record.name] = record.state.value
            launched = record.state == NodeClaimState.LAUNCHED or (previous is None and record.instance_id)
            if launched and record.name not in self.launch_order:
                self.launch_order.append(record.name)
            detail = (
                f" ({record.instance_type}, {record.zone}, {record.capacity_type})"
                if record.instance_type
                else ""
            )
            self.note(f"nodeclaim {record.name} {record.state.value}{detail}")

    def run_for(self, seconds: float) -> None:
        end = self.elapsed + seconds
        while self.elapsed < end - 1e-9:
            self.tick()

    def settled(self) -> bool:
        if self.interruption_messages_queued():  # an interruption message still to be delivered (again)
            return False
        pods = [p for p in self.kube.list_pods() if not podlib.is_terminal(p)]
        if any(p.get("status", {}).get("phase") != "Running" for p in pods):
            return False
        records = self.records.list_live()
        transient = {
            NodeClaimState.PENDING,
            NodeClaimState.LAUNCHED,
            NodeClaimState.REGISTERED,
            NodeClaimState.DISRUPTING,
            NodeClaimState.DRAINING,
            NodeClaimState.TERMINATING,
        }
        if any(r.state in transient for r in records):
            return False
        # Settled means nothing left for disruption either: no command under way or available, no
        # expired node, no node waiting out its consolidateAfter.
        outstanding = disruption_outstanding(self.plane)
        if outstanding != self._outstanding:
            self._outstanding = outstanding
            if outstanding:
                self.note(f"not settled: {outstanding}")
        return outstanding is None

    def run_step(self, step: Step) -> None:
        match step.kind:
            case "wait":
                assert step.wait is not None
                self.run_for(step.wait)
            case "event":
                assert step.event is not None
                self.put_event(step.event)
            case "scale":
                assert step.scale is not None
                self.scale(step.scale)
            case "apply":
                assert step.apply is not None
                self.apply([self._resolve_all(m) for m in step.apply])
            case "delete":
                assert step.delete is not None
                self.delete(step.delete)
            case "sqs":
                assert step.sqs is not None
                self.send_raw(self._resolve(step.sqs))
            case "fault":
                assert step.fault is not None
                self.fault(step.fault)
            case "ec2" | "patch" | "ami" | "karpenter":
                action = {
                    "ec2": ec2_action,
                    "patch": patch_object,
                    "ami": publish_ami,
                    "karpenter": karpenter_world,
                }[step.kind]
                self.note(action(self, self._resolve_all(getattr(step, step.kind))))

    def run(self) -> SimulationReport:
        if not self._started:
            self.start()
        for step in self.scenario.steps:
            self.run_step(step)
            self.check_invariants()
        deadline = self.elapsed + self.scenario.settle_seconds
        # Give the control plane a moment before judging, then run until settled.
        self.run_for(2 * self.schedule.tick_seconds)
        while self.elapsed < deadline and not self.settled():
            self.run_for(self.schedule.tick_seconds * 5)
        if self.settled():
            self.note("settled: every pod Running, no NodeClaim in transition, nothing left to disrupt")
        else:
            self.note(f"not settled after {self.scenario.settle_seconds:.0f}s")
        self.check_invariants(final=True)
        return self.report()

    def check_invariants(self, final: bool = False) -> InvariantReport:
        """Check the fault-tolerance invariants now; violations go on the timeline."""
        report = self.invariants.check(final=final)
        for violation in report.violations():
            self.note(f"invariant violated: {violation}")
        return report

    def report(self) -> SimulationReport:
        pods = [p for p in self.kube.list_pods() if not podlib.is_terminal(p)]
        running = sum(1 for p in pods if p.get("status", {}).get("phase") == "Running")
        records = self.plane.store.list()
        claims = [
            {
                "name": r.name,
                "nodepool": r.nodepool,
                "instance_type": r.instance_type,
                "zone": r.zone,
                "capacity_type": r.capacity_type,
                "state": r.state.value,
                "node": r.node_name,
                "instance_id": r.instance_id,
                "price_per_hour": r.price_per_hour,
            }
            for r in sorted(records, key=lambda r: (r.created_at, r.name))
        ]
        instances = {"running": 0, "pending": 0, "terminated": 0}
        filters = [{"Name": f"tag:{wk.TAG_CLUSTER_PREFIX}{self.cluster_name}", "Values": ["owned"]}]
        for page in self.ec2.get_paginator("describe_instances").paginate(Filters=filters):
            for reservation in page["Reservations"]:
                for raw in reservation["Instances"]:
                    state = raw["State"]["Name"]
                    key = (
                        "terminated"
                        if state in ("terminated", "shutting-down")
                        else ("running" if state == "running" else "pending")
                    )
                    instances[key] += 1
        assert self.resources is not None
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.resources.dlq_url, AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]
        cost = sum(r.price_per_hour or 0.0 for r in records if r.is_active)
        return SimulationReport(
            scenario=self.scenario.name,
            virtual_seconds=round(self.elapsed, 1),
            pods={"total": len(pods), "running": running, "pending": len(pods) - running},
            nodeclaims=claims,
            instances=instances,
            cost_per_hour=round(cost, 4),
            events_handled=self.events_handled,
            dlq_messages=int(attributes.get("ApproximateNumberOfMessages", 0)),
            timeline=list(self.timeline),
            lambda_invocations=dict(self.lambdas.invocations),
            lambda_errors=dict(self.lambdas.errors),
            pdb_violations=self.kube_server.audit.pdb_violations,
            invariants=self.invariants.reports[-1] if self.invariants.reports else None,
            faults_injected=self.faults.total_injected,
        )


def log_path(scenario: str) -> Path:
    folder = Path(".serverless-karpenter")
    folder.mkdir(exist_ok=True)
    return folder / f"simulate-{scenario}.log"


def keep_environment(sim: Simulation) -> dict[str, str]:
    """Prepare a finished simulation to be inspected by `status`, `doctor` and `explain` from another
    process (``simulate --keep``): the stack's outputs and functions seeded in moto, the node role
    mapped in aws-auth (moto has no access-entry API), and the environment that reaches both servers."""

    res = sim.resources
    assert res is not None, "start the simulation first"
    account = str(sim.cloud.client("sts").get_caller_identity()["Account"])
    node_role = f"arn:aws:iam::{account}:role/{res.node_role_name}"
    map_roles = [
        {
            "rolearn": node_role,
            "username": "system:node:{{EC2PrivateDNSName}}",
            "groups": ["system:bootstrappers", "system:nodes"],
        }
    ]
    k8s_utils.create_from_dict(
        sim.api_client,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "aws-auth", "namespace": "kube-system"},
            "data": {"mapRoles": json.dumps(map_roles)},
        },
    )
    names = (
        "AWS_ENDPOINT_URL",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "CLUSTER_NAME",
        "STATE_TABLE_NAME",
        "INTERRUPTION_QUEUE_URL",
        "INTERRUPTION_DLQ_URL",
        "NODE_ROLE_NAME",
        "KUBERNETES_API_URL",
    )
    return {name: os.environ[name] for name in names if os.environ.get(name)}
