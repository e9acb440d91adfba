"""The invariants a fault-tolerant control plane keeps, computed from moto, the API server and the store.

- every instance tagged for the cluster has a live NodeClaim once the garbage-collection grace is over,
  and every NodeClaim has at most one live instance;
- every non-terminal pod is Running by the end;
- no PodDisruptionBudget was ever violated (the API server's audit);
- every interruption message was acted on (acknowledged) or is in the DLQ with a reason;
- no Node keeps our termination finalizer once its instance is gone;
- every deletion we begin is carried through: a NodeClaim marked for deletion whose instance still runs
  has its Node being deleted (a claim left Disrupting beside a live Node would hold its node, and its
  NodePool's disruption budget, for ever), and one whose Node and instance are gone is closed;
- drains end: every deleting node is gone within its terminationGracePeriod, or 15 minutes, plus a
  margin (``drains.py``);
- a pod evicted by a voluntary disruption has a Running replacement within a bound, and no
  PodDisruptionBudget falls below what it allows meanwhile (``availability.py``);
- no NodePool starts a voluntary disruption beyond its disruption budget, with Karpenter's total of
  initialized nodes (``node_budgets.py``);
- no Lambda invocation raised or logged an AccessDenied or a 403, or raised an exception that no
  injected fault caused (``lambda_failures.py``).

The longest a pod waited to run is sampled every tick (:meth:`Invariants.observe_pending`), not only
when the invariants are checked.

Conditions that are legitimately transient (an instance between CreateFleet and its record, a Node
between TerminateInstances and its finalizer's removal) count as violations only once they have lasted
longer than the control plane's own period for repairing them, or at the end of a run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from serverless_karpenter.api import labels as wk
from serverless_karpenter.clock import parse_rfc3339
from serverless_karpenter.lifecycle.model import NodeClaimState
from serverless_karpenter.scheduling import pods as podlib

from serverless_karpenter_sim.availability import DisruptionAvailability
from serverless_karpenter_sim.cloud_instances import cluster_instance_tags
from serverless_karpenter_sim.drains import stuck_drains
from serverless_karpenter_sim.node_budgets import NodeBudgets

if TYPE_CHECKING:
    from serverless_karpenter_sim.simulation import Simulation

ALIVE_STATES = ("pending", "running", "stopping", "stopped")  # not shutting down or terminated


@dataclass
class InvariantReport:
    at: float  # virtual seconds since the start
    final: bool
    leaked_instances: list[str] = field(default_factory=list)
    orphans_within_grace: list[str] = field(default_factory=list)
    claims_with_several_instances: dict[str, list[str]] = field(default_factory=dict)
    pods_not_running: list[str] = field(default_factory=list)  # judged at the end only
    pending_pods: int = 0
    max_pending_seconds: float = 0.0
    pdb_violations: int = 0
    lost_messages: list[str] = field(default_factory=list)
    messages_received: int = 0
    messages_acted_on: int = 0
    messages_parked: int = 0
    nodes_with_finalizer_and_no_instance: list[str] = field(default_factory=list)
    claims_stuck_deleting: list[str] = field(default_factory=list)
    deletions_not_carried_through: list[str] = field(default_factory=list)
    stuck_drains: list[str] = field(default_factory=list)
    disruption_evictions: int = 0
    disruption_pending_pod_seconds: float = 0.0
    max_disruption_pending_seconds: float = 0.0
    disruption_pending_bound_seconds: float = 0.0
    pods_stranded_by_disruption: list[str] = field(default_factory=list)
    pdb_floor_breaches: list[str] = field(default_factory=list)
    budget_breaches: list[str] = field(default_factory=list)
    lambda_failures: list[str] = field(default_factory=list)  # those that page
    lambda_failures_caused_by_faults: int = 0

    def violations(self) -> list[str]:
        out = []
        if self.leaked_instances:
            out.append(f"instances with no NodeClaim past the GC grace: {', '.join(self.leaked_instances)}")
        for claim, instances in self.claims_with_several_instances.items():
            out.append(f"nodeclaim {claim} has {len(instances)} instances: {', '.join(instances)}")
        if self.pods_not_running:
            out.append(f"pods not Running at the end: {', '.join(self.pods_not_running[:10])}")
        if self.pdb_violations:
            out.append(f"{self.pdb_violations} PodDisruptionBudget violation(s)")
        if self.lost_messages:
            out.append(f"interruption messages lost: {', '.join(self.lost_messages)}")
        if self.nodes_with_finalizer_and_no_instance:
            out.append(
                "nodes left with our finalizer and no instance: "
                + ", ".join(self.nodes_with_finalizer_and_no_instance)
            )
        if self.claims_stuck_deleting:
            out.append(
                "nodeclaims still deleting with neither node nor instance: "
                + ", ".join(self.claims_stuck_deleting)
            )
        if self.deletions_not_carried_through:
            out.append(
                "nodeclaims marked for deletion whose running Node is not being deleted: "
                + ", ".join(self.deletions_not_carried_through)
            )
        out.extend(f"drain past its bound: {d}" for d in self.stuck_drains)
        bound = self.disruption_pending_bound_seconds
        out.extend(
            f"pod stranded by a voluntary disruption (bound {bound:.0f}s): {p}"
            for p in self.pods_stranded_by_disruption
        )
        out.extend(self.pdb_floor_breaches)
        out.extend(self.budget_breaches)
        out.extend(f"Lambda invocation failed: {f}" for f in self.lambda_failures)
        return out

    @property
    def ok(self) -> bool:
        return not self.violations()

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "final": self.final,
            "ok": self.ok,
            "leaked_instances": self.leaked_instances,
            "orphans_within_grace": self.orphans_within_grace,
            "claims_with_several_instances": self.claims_with_several_instances,
            "pods_not_running": self.pods_not_running,
            "pending_pods": self.pending_pods,
            "max_pending_seconds": self.max_pending_seconds,
            "pdb_violations": self.pdb_violations,
            "lost_messages": self.lost_messages,
            "messages_received": self.messages_received,
            "messages_acted_on": self.messages_acted_on,
            "messages_parked": self.messages_parked,
            "nodes_with_finalizer_and_no_instance": self.nodes_with_finalizer_and_no_instance,
            "claims_stuck_deleting": self.claims_stuck_deleting,
            "deletions_not_carried_through": self.deletions_not_carried_through,
            "stuck_drains": self.stuck_drains,
            "disruption_evictions": self.disruption_evictions,
            "disruption_pending_pod_seconds": self.disruption_pending_pod_seconds,
            "max_disruption_pending_seconds": self.max_disruption_pending_seconds,
            "disruption_pending_bound_seconds": self.disruption_pending_bound_seconds,
            "pods_stranded_by_disruption": self.pods_stranded_by_disruption,
            "pdb_floor_breaches": self.pdb_floor_breaches,
            "budget_breaches": self.budget_breaches,
            "lambda_failures": self.lambda_failures,
            "lambda_failures_caused_by_faults": self.lambda_failures_caused_by_faults,
        }


class Invariants:
    """Checks one simulation's invariants; remembers since when each transient condition has held."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self._orphan_since: dict[str, float] = {}
        self._finalizer_since: dict[str, float] = {}
        self._stuck_since: dict[str, float] = {}
        self._stalled_since: dict[str, float] = {}
        self.max_pending_seconds = 0.0
        self.reports: list[InvariantReport] = []
        self.availability = DisruptionAvailability(sim)
        self.node_budgets = NodeBudgets(sim)

    @property
    def gc_deadline(self) -> float:
        """How long an untracked instance may live: the GC grace plus two provisioner passes."""
        grace = float(self.sim.settings.garbage_collection_grace_seconds)
        return grace + 2 * self.sim.schedule.provisioner_every

    @property
    def finalizer_deadline(self) -> float:
        return 4 * self.sim.schedule.termination_every + 2 * self.sim.schedule.provisioner_every

    @property
    def deletion_deadline(self) -> float:
        """How long a claim may be marked for deletion beside a Node nobody deletes: an interruption whose
        handler died part-way is retried after the queue's visibility timeout, twice at worst."""
        assert self.sim.resources is not None
        return 2 * self.sim.resources.queue_visibility_timeout + self.finalizer_deadline

    def observe(self) -> None:
        """What must be sampled every tick: the oldest pending pod, and voluntary evictions."""
        self.observe_pending()
        self.availability.observe()
        self.node_budgets.observe()

    def observe_pending(self) -> None:
        """Sample the oldest pending pod (the simulator calls this every tick; checks come less often)."""
        self._pending_ages(self.sim.kube.list_pods(field_selector="status.phase=Pending"))

    def _pending_ages(self, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The non-terminal pods, not being deleted, that are not Running; the oldest sets the maximum."""
        clock_now = self.sim.clock.now()
        pending = []
        for pod in pods:
            if podlib.is_terminal(pod) or podlib.is_deleting(pod):
                continue
            if (pod.get("status") or {}).get("phase") == "Running":
                continue
            pending.append(pod)
            created = pod["metadata"].get("creationTimestamp")
            if created:
                age = (clock_now - _time(created)).total_seconds()
                self.max_pending_seconds = max(self.max_pending_seconds, age)
        return pending

    def check(self, final: bool = False) -> InvariantReport:
        sim = self.sim
        now = sim.elapsed
        report = InvariantReport(at=round(now, 1), final=final)
        records = sim.plane.store.list()  # with the Terminated: a drain that ended past its bound counts
        live_claims = {r.name for r in records if r.state != NodeClaimState.TERMINATED}
        live_ids = {r.instance_id for r in records if r.state != NodeClaimState.TERMINATED and r.instance_id}
        alive = self._alive_instances()

        per_claim: dict[str, list[str]] = {}
        orphans = set()
        for instance_id, tags in alive.items():
            claim = tags.get(wk.NODECLAIM)
            if claim:
                per_claim.setdefault(claim, []).append(instance_id)
            if claim not in live_claims and instance_id not in live_ids:
                orphans.add(instance_id)
        for instance_id in orphans:
            since = self._orphan_since.setdefault(instance_id, now)
            if now - since > self.gc_deadline:
                report.leaked_instances.append(instance_id)
            else:
                report.orphans_within_grace.append(instance_id)
        self._orphan_since = {i: t for i, t in self._orphan_since.items() if i in orphans}
        report.claims_with_several_instances = {c: ids for c, ids in per_claim.items() if len(ids) > 1}

        stuck = set()
        nodes = sim.kube.list_nodes()
        nodes_by_provider_id = {(n.get("spec") or {}).get("providerID"): n for n in nodes}
        stalled = set()
        for record in records:
            if not record.is_deleting or record.instance_id not in alive:
                continue  # with its instance gone, the reconciler closes the claim (checked below)
            node = nodes_by_provider_id.get(record.provider_id) if record.provider_id else None
            if node is None or node["metadata"].get("deletionTimestamp"):
                continue
            stalled.add(record.name)
            since = self._stalled_since.setdefault(record.name, now)
            if final or now - since > self.deletion_deadline:
                report.deletions_not_carried_through.append(record.name)
        self._stalled_since = {n: t for n, t in self._stalled_since.items() if n in stalled}
        # The dual of a Node kept by our finalizer: a deletion whose Node and instance are both gone but
        # whose record never closed (nothing would ever revisit it).
        deleting = set()
        for record in records:
            if not record.is_deleting or record.state == NodeClaimState.TERMINATED:
                continue
            has_node = bool(record.provider_id) and record.provider_id in nodes_by_provider_id
            if record.instance_id in alive or has_node:
                continue
            deleting.add(record.name)
            since = self._stuck_since.setdefault(record.name, now)
            if final or now - since > self.finalizer_deadline:
                report.claims_stuck_deleting.append(record.name)
        self._stuck_since = {n: t for n, t in self._stuck_since.items() if n in deleting}
        for node in nodes:
            if wk.TERMINATION_FINALIZER not in (node["metadata"].get("finalizers") or []):
                continue
            provider_id = (node.get("spec") or {}).get("providerID") or ""
            instance_id = provider_id.rsplit("/", 1)[-1]
            if instance_id in alive:
                continue
            name = node["metadata"]["name"]
            stuck.add(name)
            since = self._finalizer_since.setdefault(name, now)
            if final or now - since > self.finalizer_deadline:
                report.nodes_with_finalizer_and_no_instance.append(name)
        self._finalizer_since = {n: t for n, t in self._finalizer_since.items() if n in stuck}

        pending = self._pending_ages(sim.kube.list_pods())
        report.pending_pods = len(pending)
        if final:
            report.pods_not_running.extend(podlib.key(pod) for pod in pending)
        report.max_pending_seconds = round(self.max_pending_seconds, 1)
        report.pdb_violations = sim.kube_server.audit.pdb_violations
        report.stuck_drains = stuck_drains(
            records, nodes, sim.clock.now(), sim.scenario.invariants.drain_margin_seconds
        )
        self.availability.report(report)
        self.node_budgets.report(report)
        failures = sim.lambdas.failures
        report.lambda_failures = [f.describe() for f in failures if f.pages]
        report.lambda_failures_caused_by_faults = sum(1 for f in failures if not f.pages)
        self._messages(report, final)
        sorted_fields(report)
        self.reports.append(report)
        return report

    def _alive_instances(self) -> dict[str, dict[str, str]]:
        """The cluster's instances not shutting down or gone (id -> tags), from moto's model: moto keeps
        terminated ones, and the invariants look at the live ones only."""
        return cluster_instance_tags(self.sim.cluster_name, frozenset(ALIVE_STATES))

    def _messages(self, report: InvariantReport, final: bool) -> None:
        sim = self.sim
        assert sim.resources is not None
        ledger = sim.faults.sqs
        parked, unexplained = self._dlq()
        report.messages_received = len(ledger.received)
        report.messages_acted_on = len(ledger.acknowledged)
        report.messages_parked = len(parked)
        # A message moved to the DLQ by redrive carries no reason: somebody gave up on it silently.
        report.lost_messages.extend(sorted(unexplained))
        if final:
            attributes = sim.sqs.get_queue_attributes(
                QueueUrl=sim.resources.queue_url,
                AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
            )["Attributes"]
            in_queue = sum(int(v) for v in attributes.values())
            if in_queue:
                report.lost_messages.append(f"{in_queue} message(s) still in the queue")
            for message_id in sorted(ledger.received):
                if (
                    message_id not in ledger.acknowledged
                    and message_id not in parked
                    and (message_id not in unexplained)
                ):
                    report.lost_messages.append(message_id)

    def _dlq(self) -> tuple[set[str], set[str]]:
        """Message ids in the DLQ with a reason (by the id of the message they came from) and without."""
        sim = self.sim
        assert sim.resources is not None
        seen: dict[str, dict[str, Any]] = {}
        handles = []
        for _ in range(100):
            response = sim.sqs.receive_message(
                QueueUrl=sim.resources.dlq_url,
                MaxNumberOfMessages=10,
                MessageAttributeNames=["All"],
                VisibilityTimeout=30,
            )
            messages = response.get("Messages") or []
            if not messages:
                break
            for message in messages:
                seen[message["MessageId"]] = message
                handles.append(message["ReceiptHandle"])
        for handle in handles:  # leave the DLQ as it was
            sim.sqs.change_message_visibility(
                QueueUrl=sim.resources.dlq_url, ReceiptHandle=handle, VisibilityTimeout=0
            )
        parked: set[str] = set()
        unexplained: set[str] = set()
        for message_id, message in seen.items():
            attributes = message.get("MessageAttributes") or {}
            reason = (attributes.get("reason") or {}).get("StringValue")
            source = (attributes.get("source-message-id") or {}).get("StringValue") or message_id
            (parked if reason else unexplained).add(source)
        return parked, unexplained


def sorted_fields(report: InvariantReport) -> None:
    report.leaked_instances.sort()
    report.orphans_within_grace.sort()
    report.nodes_with_finalizer_and_no_instance.sort()
    report.claims_stuck_deleting.sort()
    report.deletions_not_carried_through.sort()
    report.pods_not_running.sort()


def _time(value: str) -> datetime:
    return parse_rfc3339(value)
