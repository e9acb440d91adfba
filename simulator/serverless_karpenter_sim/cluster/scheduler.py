"""A small kube-scheduler: filter, score, bind.

It is written from kube-scheduler's documented semantics and plugin order, and independently of our solver,
so that the two cross-check each other: a pod our solver placed on a node that this scheduler cannot bind
there is a bug in one of them.

:class:`ClusterSnapshot` is the pure part (plain REST dicts in, decisions out) and :class:`Scheduler` is the
actor that lists, binds and writes the ``PodScheduled`` condition through the API server.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from serverless_karpenter.scheduling import resources

from serverless_karpenter_sim.cluster.informer import InformedRest
from serverless_karpenter_sim.cluster.objects import (
    NODES_PATH,
    Obj,
    condition,
    first_untolerated_taint,
    is_deleting,
    is_node_ready,
    is_terminal,
    key_of,
    label_selector_matches,
    labels_of,
    meta,
    name_of,
    namespace_of,
    new_condition,
    node_selector_term_matches,
    pod_matches_node_selector_and_affinity,
    pod_path,
    pod_requests,
    pods_path,
    timestamp,
    tolerated,
    uid_of,
    with_condition,
)
from serverless_karpenter_sim.kubeapi.store import Store

DEFAULT_SCHEDULER_NAME = "default-scheduler"
HOSTNAME_KEY = "kubernetes.io/hostname"

# The taints the node lifecycle controller keeps on nodes that are not Ready; we apply them virtually so
# that a NotReady node is filtered, and reported, exactly as kube-scheduler would report it.
NOT_READY_TAINT: Obj = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
UNREACHABLE_TAINT: Obj = {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}
UNSCHEDULABLE_TAINT: Obj = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}

# Filter failure reasons, in kube-scheduler's words.
REASON_NODE_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
REASON_NODE_PORTS = "node(s) didn't have free ports for the requested pod ports"
REASON_TOO_MANY_PODS = "Too many pods"
REASON_POD_AFFINITY = "node(s) didn't match pod affinity rules"
REASON_POD_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
REASON_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
REASON_SPREAD = "node(s) didn't match pod topology spread constraints"
REASON_SPREAD_MISSING_LABEL = "node(s) didn't match pod topology spread constraints (missing required label)"
REASON_VOLUME_ZONE = "node(s) had no available volume zone"
REASON_VOLUME_NODE_AFFINITY = "node(s) had volume node affinity conflict"
NO_NODES_AVAILABLE = "no nodes available to schedule pods"
SCHEDULING_GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"

ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")

# kube-scheduler scores a container without requests as if it asked for this much.
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
MAX_NODE_SCORE = 100
HARD_POD_AFFINITY_WEIGHT = 1

# Default score plugin weights of kube-scheduler's profile.
WEIGHT_FIT = 1
WEIGHT_BALANCED = 1
WEIGHT_TAINTS = 3
WEIGHT_NODE_AFFINITY = 2
WEIGHT_POD_AFFINITY = 2
WEIGHT_SPREAD = 2

ScoringStrategy = Literal["LeastAllocated", "MostAllocated"]


def untolerated_taint_reason(taint: Obj) -> str:
    return f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value') or ''}}}"


def fit_error_message(num_nodes: int, reasons: Mapping[str, int]) -> str:
    """kube-scheduler's FitError text: ``0/3 nodes are available: 1 Insufficient cpu, 2 node(s) ...``."""
    histogram = sorted(f"{count} {reason}" for reason, count in reasons.items())
    message = f"0/{num_nodes} nodes are available:"
    if histogram:
        message += " " + ", ".join(histogram) + "."
    return message


# --- parsed objects ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AffinityTerm:
    """A pod (anti-)affinity term with its namespaces resolved (None: every namespace)."""

    namespaces: frozenset[str] | None
    selector: Obj | None
    topology_key: str
    weight: int = 0

    def matches(self, pod: PodInfo) -> bool:
        if self.namespaces is not None and pod.namespace not in self.namespaces:
            return False
        return label_selector_matches(self.selector, pod.labels)

    @property
    def cache_key(self) -> tuple[tuple[str, ...] | None, str]:
        names = None if self.namespaces is None else tuple(sorted(self.namespaces))
        return names, json.dumps(self.selector, sort_keys=True)


def _resolve_namespaces(
    term: Obj, own_namespace: str, namespace_labels: Mapping[str, Mapping[str, str]]
) -> frozenset[str] | None:
    names = set(term.get("namespaces") or [])
    namespace_selector = term.get("namespaceSelector")
    if namespace_selector is None:
        return frozenset(names or {own_namespace})
    if not namespace_selector.get("matchLabels") and not namespace_selector.get("matchExpressions"):
        return None
    names.update(
        ns for ns, labels in namespace_labels.items() if label_selector_matches(namespace_selector, labels)
    )
    return frozenset(names)


def _terms(
    raw_terms: Iterable[Obj],
    own_namespace: str,
    namespace_labels: Mapping[str, Mapping[str, str]],
    weighted: bool,
) -> tuple[AffinityTerm, ...]:
    out = []
    for raw in raw_terms:
        term = (raw.get("podAffinityTerm") or {}) if weighted else raw
        out.append(
            AffinityTerm(
                namespaces=_resolve_namespaces(term, own_namespace, namespace_labels),
                selector=term.get("labelSelector"),
                topology_key=term.get("topologyKey") or "",
                weight=int(raw.get("weight") or 0) if weighted else 0,
            )
        )
    return tuple(out)


def _host_ports(spec: Obj) -> list[tuple[str, str, int]]:
    host_network = bool(spec.get("hostNetwork"))
    ports = []
    for container in spec.get("containers") or []:
        for port in container.get("ports") or []:
            host_port = port.get("hostPort") or (port.get("containerPort") if host_network else 0)
            if host_port:
                ports.append((port.get("hostIP") or "0.0.0.0", port.get("protocol") or "TCP", int(host_port)))
    return ports


def _nonzero_requests(spec: Obj) -> tuple[int, int]:
    """cpu and memory as kube-scheduler scores them: containers without requests count as 100m / 200Mi."""

    def of(container: Obj) -> tuple[int, int]:
        res = container.get("resources") or {}
        merged = dict(res.get("limits") or {})
        merged.update(res.get("requests") or {})
        cpu = resources.parse(resources.CPU, merged["cpu"]) if "cpu" in merged else DEFAULT_MILLI_CPU_REQUEST
        mem = (
            resources.parse(resources.MEMORY, merged["memory"])
            if "memory" in merged
            else DEFAULT_MEMORY_REQUEST
        )
        return cpu, mem

    cpu = mem = 0
    for container in spec.get("containers") or []:
        c, m = of(container)
        cpu, mem = cpu + c, mem + m
    for container in spec.get("initContainers") or []:
        c, m = of(container)
        cpu, mem = max(cpu, c), max(mem, m)
    overhead = resources.parse_list(spec.get("overhead"))
    return cpu + overhead.get(resources.CPU, 0), mem + overhead.get(resources.MEMORY, 0)


class PodInfo:
    """A pod with what the filters need parsed once."""

    __slots__ = (
        "created",
        "deleting",
        "host_ports",
        "key",
        "labels",
        "namespace",
        "node_name",
        "nonzero",
        "obj",
        "preferred_affinity",
        "preferred_anti_affinity",
        "priority",
        "requests",
        "required_affinity",
        "required_anti_affinity",
        "spec",
        "tolerations",
        "uid",
    )

    def __init__(self, pod: Obj, namespace_labels: Mapping[str, Mapping[str, str]]) -> None:
        self.obj = pod
        self.spec: Obj = pod.get("spec") or {}
        self.key = key_of(pod)
        self.uid = uid_of(pod)
        self.namespace = namespace_of(pod)
        self.labels = labels_of(pod)
        self.node_name: str = self.spec.get("nodeName") or ""
        self.deleting = is_deleting(pod)
        self.requests = pod_requests(self.spec)
        self.nonzero = _nonzero_requests(self.spec)
        self.host_ports = _host_ports(self.spec)
        self.tolerations: list[Obj] = list(self.spec.get("tolerations") or [])
        self.priority = int(self.spec.get("priority") or 0)
        self.created = meta(pod).get("creationTimestamp") or ""
        affinity = self.spec.get("affinity") or {}
        pod_affinity = affinity.get("podAffinity") or {}
        pod_anti = affinity.get("podAntiAffinity") or {}
        req = "requiredDuringSchedulingIgnoredDuringExecution"
        pref = "preferredDuringSchedulingIgnoredDuringExecution"
        ns = self.namespace
        self.required_affinity = _terms(pod_affinity.get(req) or [], ns, namespace_labels, weighted=False)
        self.required_anti_affinity = _terms(pod_anti.get(req) or [], ns, namespace_labels, weighted=False)
        self.preferred_affinity = _terms(pod_affinity.get(pref) or [], ns, namespace_labels, weighted=True)
        self.preferred_anti_affinity = _terms(pod_anti.get(pref) or [], ns, namespace_labels, weighted=True)


class NodeInfo:
    """A node and the pods assigned to it."""

    __slots__ = (
        "allocatable",
        "deleting",
        "labels",
        "name",
        "nonzero_cpu",
        "nonzero_memory",
        "obj",
        "pods",
        "ports",
        "requested",
        "taints",
        "unschedulable",
    )

    def __init__(self, node: Obj) -> None:
        self.obj = node
        self.name = name_of(node)
        self.labels = labels_of(node)
        spec = node.get("spec") or {}
        self.unschedulable = bool(spec.get("unschedulable"))
        self.deleting = is_deleting(node)
        self.taints: list[Obj] = list(spec.get("taints") or [])
        ready = condition(node, "Ready")
        virtual = None
        if ready is None or ready.get("status") == "False":
            virtual = NOT_READY_TAINT
        elif ready.get("status") != "True":
            virtual = UNREACHABLE_TAINT
        if virtual and not any(t.get("key") == virtual["key"] for t in self.taints):
            self.taints.append(virtual)
        self.allocatable = resources.parse_list((node.get("status") or {}).get("allocatable"))
        self.requested: resources.ResourceList = {}
        self.nonzero_cpu = 0
        self.nonzero_memory = 0
        self.pods: list[PodInfo] = []
        self.ports: list[tuple[str, str, int]] = []

    def add(self, pod: PodInfo) -> None:
        self.pods.append(pod)
        self.requested = resources.merge(self.requested, pod.requests)
        self.nonzero_cpu += pod.nonzero[0]
        self.nonzero_memory += pod.nonzero[1]
        self.ports.extend(pod.host_ports)

    def ports_conflict(self, wanted: Iterable[tuple[str, str, int]]) -> bool:
        for ip, protocol, port in wanted:
            for used_ip, used_protocol, used_port in self.ports:
                if port != used_port or protocol != used_protocol:
                    continue
                if ip == used_ip or "0.0.0.0" in (ip, used_ip):
                    return True
        return False

    def insufficient(self, requests: Mapping[str, int]) -> list[str]:
        reasons = []
        if len(self.pods) + 1 > self.allocatable.get(resources.PODS, 0):
            reasons.append(REASON_TOO_MANY_PODS)
        for name, amount in requests.items():
            if name == resources.PODS or amount <= 0:
                continue
            if amount > self.allocatable.get(name, 0) - self.requested.get(name, 0):
                reasons.append(f"Insufficient {name}")
        return reasons


@dataclass(frozen=True)
class SpreadConstraint:
    max_skew: int
    topology_key: str
    hard: bool
    selector: Obj | None
    min_domains: int | None
    honor_node_affinity: bool
    honor_node_taints: bool

    @staticmethod
    def of_pod(pod: PodInfo) -> list[SpreadConstraint]:
        out = []
        for raw in pod.spec.get("topologySpreadConstraints") or []:
            selector = raw.get("labelSelector")
            match_label_keys = [k for k in raw.get("matchLabelKeys") or [] if k in pod.labels]
            if selector is not None and match_label_keys:
                selector = dict(selector)
                selector["matchExpressions"] = list(selector.get("matchExpressions") or []) + [
                    {"key": k, "operator": "In", "values": [pod.labels[k]]} for k in match_label_keys
                ]
            out.append(
                SpreadConstraint(
                    max_skew=int(raw.get("maxSkew") or 1),
                    topology_key=raw.get("topologyKey") or "",
                    hard=(raw.get("whenUnsatisfiable") or "DoNotSchedule") == "DoNotSchedule",
                    selector=selector,
                    min_domains=raw.get("minDomains"),
                    honor_node_affinity=(raw.get("nodeAffinityPolicy") or "Honor") == "Honor",
                    honor_node_taints=(raw.get("nodeTaintsPolicy") or "Ignore") == "Honor",
                )
            )
        return out


@dataclass
class SchedulingResult:
    pod: PodInfo
    node_name: str | None
    message: str | None = None
    reasons: Counter[str] = field(default_factory=Counter)


_CountKey = tuple[tuple[tuple[tuple[str, ...] | None, str], ...], bool]


@dataclass
class _MatchCounts:
    """Per node, how many assigned pods match every term (namespaces and selector) of a query."""

    terms: tuple[AffinityTerm, ...]
    include_terminating: bool
    per_node: dict[str, int] = field(default_factory=dict)

    def counts(self, pod: PodInfo) -> bool:
        if pod.deleting and not self.include_terminating:
            return False
        return all(t.matches(pod) for t in self.terms)


# --- the pure scheduler --------------------------------------------------------------------------------


class ClusterSnapshot:
    """Nodes and assigned pods at one moment, which pods can be scheduled against and assumed into."""

    def __init__(
        self,
        nodes: Iterable[Obj],
        pods: Iterable[Obj],
        *,
        namespaces: Iterable[Obj] = (),
        claims: Iterable[Obj] = (),
        volumes: Iterable[Obj] = (),
        scoring: ScoringStrategy = "LeastAllocated",
        rng: random.Random | None = None,
    ) -> None:
        self.scoring = scoring
        self.rng = rng or random.Random(0)
        self.namespace_labels: dict[str, dict[str, str]] = {name_of(ns): labels_of(ns) for ns in namespaces}
        self.claims: dict[tuple[str, str], Obj] = {(namespace_of(c), name_of(c)): c for c in claims}
        self.volumes: dict[str, Obj] = {name_of(v): v for v in volumes}
        self.nodes: dict[str, NodeInfo] = {}
        for node in sorted(nodes, key=name_of):
            node_info = NodeInfo(node)
            self.nodes[node_info.name] = node_info
        # Nodes being deleted still hold pods (and count for topology) but take no new ones.
        self.candidates = [n for n in self.nodes.values() if not n.deleting]
        self.assigned: list[PodInfo] = []
        self._anti_affinity_owners: list[PodInfo] = []
        self._preferring_owners: list[PodInfo] = []
        self._counts: dict[_CountKey, _MatchCounts] = {}
        # Per pod signature (Scheduler._signature): which nodes its node selector and affinity admit. Node
        # labels do not change within a snapshot, so a ReplicaSet's pods share one answer.
        self._affinity: dict[str, dict[str, bool]] = {}
        for pod in pods:
            if not (pod.get("spec") or {}).get("nodeName") or is_terminal(pod):
                continue
            pod_info = PodInfo(pod, self.namespace_labels)
            if pod_info.node_name in self.nodes:
                self._add_assigned(pod_info)

    # -- bookkeeping --

    def pod_info(self, pod: Obj) -> PodInfo:
        return PodInfo(pod, self.namespace_labels)

    def _add_assigned(self, info: PodInfo) -> None:
        self.nodes[info.node_name].add(info)
        self.assigned.append(info)
        if info.required_anti_affinity:
            self._anti_affinity_owners.append(info)
        if info.preferred_affinity or info.preferred_anti_affinity or info.required_affinity:
            self._preferring_owners.append(info)
        for query in self._counts.values():
            if query.counts(info):
                query.per_node[info.node_name] = query.per_node.get(info.node_name, 0) + 1

    def assume(self, pod: PodInfo, node_name: str) -> None:
        """Account for ``pod`` on ``node_name`` before the API server reflects the binding."""
        pod.node_name = node_name
        self._add_assigned(pod)

    def _matching_per_node(self, terms: Iterable[AffinityTerm], include_terminating: bool) -> dict[str, int]:
        """How many assigned pods on each node match all ``terms`` (cached, and kept current by assume)."""
        terms = tuple(terms)
        key: _CountKey = (tuple(t.cache_key for t in terms), include_terminating)
        query = self._counts.get(key)
        if query is None:
            query = _MatchCounts(terms, include_terminating)
            for pod in self.assigned:
                if query.counts(pod):
                    query.per_node[pod.node_name] = query.per_node.get(pod.node_name, 0) + 1
            self._counts[key] = query
        return query.per_node

    def _domain_counts(self, term: AffinityTerm, counts: Mapping[str, int]) -> dict[str, int]:
        per_domain: dict[str, int] = {}
        for node_name, count in counts.items():
            value = self.nodes[node_name].labels.get(term.topology_key)
            if value is not None and count:
                per_domain[value] = per_domain.get(value, 0) + count
        return per_domain

    # -- scheduling --

    def schedule(self, pod: PodInfo, signature: str | None = None) -> SchedulingResult:
        """Where ``pod`` goes, or why it goes nowhere. Does not assume it. ``signature``: what the filters
        read of the pod (pods with equal signatures are filtered alike)."""
        if not self.candidates:
            return SchedulingResult(pod, None, NO_NODES_AVAILABLE)
        volume_check = self._volume_constraints(pod)
        if isinstance(volume_check, str):
            return SchedulingResult(
                pod, None, f"0/{len(self.candidates)} nodes are available: {volume_check}."
            )
        affinity_ok = self._affinity.get(signature) if signature is not None else None
        if affinity_ok is None:
            affinity_ok = {
                n.name: pod_matches_node_selector_and_affinity(pod.spec, n.obj) for n in self.nodes.values()
            }
            if signature is not None:
                self._affinity[signature] = affinity_ok
        spread = self._prepare_spread(pod, affinity_ok)
        inter_pod = self._prepare_inter_pod(pod)
        reasons: Counter[str] = Counter()
        feasible: list[NodeInfo] = []
        for node in self.candidates:
            failed = self._filter(
                pod,
                node,
                affinity_ok=affinity_ok[node.name],
                volume_check=volume_check,
                spread=spread,
                inter_pod=inter_pod,
            )
            if failed:
                reasons.update(failed)
            else:
                feasible.append(node)
        if not feasible:
            return SchedulingResult(pod, None, fit_error_message(len(self.candidates), reasons), reasons)
        return SchedulingResult(pod, self._select(pod, feasible, affinity_ok))

    def _filter(
        self,
        pod: PodInfo,
        node: NodeInfo,
        *,
        affinity_ok: bool,
        volume_check: list[tuple[frozenset[str] | None, Obj | None]],
        spread: _HardSpread,
        inter_pod: _InterPod,
    ) -> list[str]:
        if node.unschedulable and not tolerated(pod.tolerations, UNSCHEDULABLE_TAINT):
            return [REASON_NODE_UNSCHEDULABLE]
        taint = first_untolerated_taint(node.taints, pod.tolerations, ("NoSchedule", "NoExecute"))
        if taint is not None:
            return [untolerated_taint_reason(taint)]
        if not affinity_ok:
            return [REASON_NODE_AFFINITY]
        if pod.host_ports and node.ports_conflict(pod.host_ports):
            return [REASON_NODE_PORTS]
        insufficient = node.insufficient(pod.requests)
        if insufficient:
            return insufficient
        for _zones, node_affinity in volume_check:
            if node_affinity is not None and not any(
                node_selector_term_matches(t, node.obj) for t in node_affinity.get("nodeSelectorTerms") or []
            ):
                return [REASON_VOLUME_NODE_AFFINITY]
        for zones, _node_affinity in volume_check:
            if zones is not None:
                node_zone = next((node.labels[k] for k in ZONE_LABELS if k in node.labels), None)
                if node_zone is not None and node_zone not in zones:
                    return [REASON_VOLUME_ZONE]
        spread_reason = spread.check(node)
        if spread_reason:
            return [spread_reason]
        affinity_reason = inter_pod.check(node)
        if affinity_reason:
            return [affinity_reason]
        return []

    # -- volumes --

    def _volume_constraints(self, pod: PodInfo) -> list[tuple[frozenset[str] | None, Obj | None]] | str:
        """Zones and node affinity of the bound PVs the pod mounts, or the PreFilter error."""
        out: list[tuple[frozenset[str] | None, Obj | None]] = []
        for volume in pod.spec.get("volumes") or []:
            source = volume.get("persistentVolumeClaim")
            if not source:
                continue
            claim_name = source.get("claimName") or ""
            claim = self.claims.get((pod.namespace, claim_name))
            if claim is None:
                return f'persistentvolumeclaim "{claim_name}" not found'
            if is_deleting(claim):
                return f'persistentvolumeclaim "{claim_name}" is being deleted'
            volume_name = (claim.get("spec") or {}).get("volumeName")
            pv = self.volumes.get(volume_name or "")
            if pv is None:
                # Unbound claims wait for their first consumer (as EKS storage classes do): no constraint.
                continue
            zones: frozenset[str] | None = None
            for label in ZONE_LABELS:
                if label in labels_of(pv):
                    zones = frozenset(labels_of(pv)[label].split("__"))
                    break
            node_affinity = ((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required")
            out.append((zones, node_affinity))
        return out

    # -- topology spread --

    def _prepare_spread(self, pod: PodInfo, affinity_ok: Mapping[str, bool]) -> _HardSpread:
        constraints = [c for c in SpreadConstraint.of_pod(pod) if c.hard]
        prepared = []
        required_keys = [c.topology_key for c in constraints]
        for c in constraints:
            counts = self._spread_counts(pod, c)
            per_domain: dict[str, int] = {}
            for node in self.nodes.values():
                if not self._spread_eligible(pod, c, node, required_keys, affinity_ok):
                    continue
                value = node.labels[c.topology_key]
                per_domain[value] = per_domain.get(value, 0) + counts.get(node.name, 0)
            min_match = min(per_domain.values()) if per_domain else 0
            if c.min_domains is not None and len(per_domain) < c.min_domains:
                min_match = 0
            self_match = 1 if label_selector_matches(c.selector, pod.labels) else 0
            prepared.append((c, per_domain, min_match, self_match))
        return _HardSpread(required_keys, prepared)

    def _spread_counts(self, pod: PodInfo, c: SpreadConstraint) -> dict[str, int]:
        term = AffinityTerm(frozenset({pod.namespace}), c.selector, c.topology_key)
        # Terminating pods do not count toward spreading (kubernetes/kubernetes#87621).
        return self._matching_per_node([term], include_terminating=False)

    @staticmethod
    def _spread_eligible(
        pod: PodInfo,
        c: SpreadConstraint,
        node: NodeInfo,
        required_keys: Iterable[str],
        affinity_ok: Mapping[str, bool],
    ) -> bool:
        if any(k not in node.labels for k in required_keys):
            return False
        if c.honor_node_affinity and not affinity_ok[node.name]:
            return False
        return not (
            c.honor_node_taints
            and first_untolerated_taint(node.taints, pod.tolerations, ("NoSchedule", "NoExecute")) is not None
        )

    # -- inter-pod affinity --

    def _prepare_inter_pod(self, pod: PodInfo) -> _InterPod:
        affinity_domains: list[tuple[str, dict[str, int]]] = []
        any_affinity_match = False
        if pod.required_affinity:
            # An existing pod counts only if it matches every term (kube-scheduler's affinityCounts).
            counts = self._matching_per_node(pod.required_affinity, include_terminating=True)
            any_affinity_match = any(counts.values())
            affinity_domains = [
                (t.topology_key, self._domain_counts(t, counts)) for t in pod.required_affinity
            ]
        anti_domains = [
            (t.topology_key, self._domain_counts(t, self._matching_per_node([t], include_terminating=True)))
            for t in pod.required_anti_affinity
        ]
        forbidden: set[tuple[str, str]] = set()
        for owner in self._anti_affinity_owners:
            owner_node = self.nodes[owner.node_name]
            for term in owner.required_anti_affinity:
                value = owner_node.labels.get(term.topology_key)
                if value is not None and term.matches(pod):
                    forbidden.add((term.topology_key, value))
        self_match = bool(pod.required_affinity) and all(t.matches(pod) for t in pod.required_affinity)
        return _InterPod(affinity_domains, any_affinity_match, self_match, anti_domains, forbidden)

    # -- scoring --

    def _select(self, pod: PodInfo, feasible: list[NodeInfo], affinity_ok: Mapping[str, bool]) -> str:
        if len(feasible) == 1:
            return feasible[0].name
        totals = [0] * len(feasible)
        for weight, scores in (
            (WEIGHT_FIT, self._score_fit(pod, feasible)),
            (WEIGHT_BALANCED, self._score_balanced(pod, feasible)),
            (WEIGHT_TAINTS, self._score_taints(pod, feasible)),
            (WEIGHT_NODE_AFFINITY, self._score_node_affinity(pod, feasible)),
            (WEIGHT_POD_AFFINITY, self._score_inter_pod(pod, feasible)),
            (WEIGHT_SPREAD, self._score_spread(pod, feasible, affinity_ok)),
        ):
            for i, score in enumerate(scores):
                totals[i] += weight * score
        best = max(totals)
        tied = [node.name for node, total in zip(feasible, totals, strict=True) if total == best]
        return tied[0] if len(tied) == 1 else self.rng.choice(tied)

    def _score_fit(self, pod: PodInfo, nodes: list[NodeInfo]) -> list[int]:
        scores = []
        for node in nodes:
            per_resource = []
            for requested, name in (
                (node.nonzero_cpu + pod.nonzero[0], resources.CPU),
                (node.nonzero_memory + pod.nonzero[1], resources.MEMORY),
            ):
                capacity = node.allocatable.get(name, 0)
                if capacity <= 0 or requested > capacity:
                    per_resource.append(0)
                elif self.scoring == "LeastAllocated":
                    per_resource.append((capacity - requested) * MAX_NODE_SCORE // capacity)
                else:
                    per_resource.append(requested * MAX_NODE_SCORE // capacity)
            scores.append(sum(per_resource) // len(per_resource))
        return scores

    @staticmethod
    def _score_balanced(pod: PodInfo, nodes: list[NodeInfo]) -> list[int]:
        scores = []
        for node in nodes:
            fractions = []
            for requested, name in (
                (node.requested.get(resources.CPU, 0) + pod.requests.get(resources.CPU, 0), resources.CPU),
                (
                    node.requested.get(resources.MEMORY, 0) + pod.requests.get(resources.MEMORY, 0),
                    resources.MEMORY,
                ),
            ):
                capacity = node.allocatable.get(name, 0)
                fractions.append(min(1.0, requested / capacity) if capacity > 0 else 1.0)
            deviation = abs(fractions[0] - fractions[1]) / 2
            scores.append(int((1 - deviation) * MAX_NODE_SCORE))
        return scores

    @staticmethod
    def _score_taints(pod: PodInfo, nodes: list[NodeInfo]) -> list[int]:
        tolerations = [
            t for t in pod.tolerations if (t.get("effect") or "PreferNoSchedule") == "PreferNoSchedule"
        ]
        raw = [
            sum(
                1 for t in n.taints if t.get("effect") == "PreferNoSchedule" and not tolerated(tolerations, t)
            )
            for n in nodes
        ]
        worst = max(raw)
        if worst == 0:
            return [MAX_NODE_SCORE] * len(nodes)
        return [MAX_NODE_SCORE - r * MAX_NODE_SCORE // worst for r in raw]

    @staticmethod
    def _score_node_affinity(pod: PodInfo, nodes: list[NodeInfo]) -> list[int]:
        node_affinity = (pod.spec.get("affinity") or {}).get("nodeAffinity") or {}
        preferred = node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        if not preferred:
            return [0] * len(nodes)
        raw = [
            sum(
                int(p.get("weight") or 0)
                for p in preferred
                if node_selector_term_matches(p.get("preference") or {}, n.obj)
            )
            for n in nodes
        ]
        best = max(raw)
        return [r * MAX_NODE_SCORE // best if best > 0 else 0 for r in raw]

    def _score_inter_pod(self, pod: PodInfo, nodes: list[NodeInfo]) -> list[int]:
        pair_scores: dict[tuple[str, str], int] = {}

        def add(key: str, value: str | None, amount: int) -> None:
            if value is not None and amount:
                pair_scores[(key, value)] = pair_scores.get((key, value), 0) + amount

        for sign, terms in ((1, pod.preferred_affinity), (-1, pod.preferred_anti_affinity)):
            for term in terms:
                for value, count in self._domain_counts(
                    term, self._matching_per_node([term], include_terminating=True)
                ).items():
                    add(term.topology_key, value, sign * term.weight * count)
        for owner in self._preferring_owners:
            owner_labels = self.nodes[owner.node_name].labels
            for term in owner.required_affinity:
                if term.matches(pod):
                    add(term.topology_key, owner_labels.get(term.topology_key), HARD_POD_AFFINITY_WEIGHT)
            for sign, terms in ((1, owner.preferred_affinity), (-1, owner.preferred_anti_affinity)):
                for term in terms:
                    if term.matches(pod):
                        add(term.topology_key, owner_labels.get(term.topology_key), sign * term.weight)
        if not pair_scores:
            return [0] * len(nodes)
        raw = [
            sum(pair_scores.get((k, n.labels.get(k, "")), 0) for k in {k for k, _ in pair_scores})
            for n in nodes
        ]
        low, high = min(raw), max(raw)
        if high == low:
            return [0] * len(nodes)
        return [(r - low) * MAX_NODE_SCORE // (high - low) for r in raw]

    def _score_spread(
        self, pod: PodInfo, nodes: list[NodeInfo], affinity_ok: Mapping[str, bool]
    ) -> list[int]:
        constraints = [c for c in SpreadConstraint.of_pod(pod) if not c.hard]
        if not constraints:
            return [0] * len(nodes)
        keys = [c.topology_key for c in constraints]
        scored = [n for n in nodes if all(k in n.labels for k in keys)]
        raw: dict[str, float] = {n.name: 0.0 for n in scored}
        for c in constraints:
            counts = self._spread_counts(pod, c)
            domains = {n.labels[c.topology_key] for n in scored}
            per_domain: dict[str, int] = dict.fromkeys(domains, 0)
            for node in self.nodes.values():
                value = node.labels.get(c.topology_key)
                if value in per_domain and self._spread_eligible(pod, c, node, keys, affinity_ok):
                    per_domain[value] += counts.get(node.name, 0)
            weight = math.log(len(domains) + 2)
            for n in scored:
                raw[n.name] += (per_domain[n.labels[c.topology_key]] + c.max_skew - 1) * weight
        if not raw:
            return [0] * len(nodes)
        high, low = max(raw.values()), min(raw.values())
        out = []
        for n in nodes:
            if n.name not in raw:
                out.append(0)
            elif high == 0:
                out.append(MAX_NODE_SCORE)
            else:
                out.append(int(MAX_NODE_SCORE * (high + low - raw[n.name]) / high))
        return out


@dataclass
class _HardSpread:
    required_keys: list[str]
    prepared: list[tuple[SpreadConstraint, dict[str, int], int, int]]

    def check(self, node: NodeInfo) -> str | None:
        if not self.prepared:
            return None
        if any(k not in node.labels for k in self.required_keys):
            return REASON_SPREAD_MISSING_LABEL
        for c, per_domain, min_match, self_match in self.prepared:
            skew = per_domain.get(node.labels[c.topology_key], 0) + self_match - min_match
            if skew > c.max_skew:
                return REASON_SPREAD
        return None


@dataclass
class _InterPod:
    affinity_domains: list[tuple[str, dict[str, int]]]
    any_affinity_match: bool
    self_match: bool
    anti_domains: list[tuple[str, dict[str, int]]]
    forbidden: set[tuple[str, str]]

    def check(self, node: NodeInfo) -> str | None:
        if self.affinity_domains:
            satisfied = True
            for key, per_domain in self.affinity_domains:
                value = node.labels.get(key)
                if value is None:
                    return REASON_POD_AFFINITY
                if per_domain.get(value, 0) <= 0:
                    satisfied = False
            # The first of a group of pods with affinity to each other may go anywhere the keys exist.
            if not satisfied and not (not self.any_affinity_match and self.self_match):
                return REASON_POD_AFFINITY
        for key, per_domain in self.anti_domains:
            value = node.labels.get(key)
            if value is not None and per_domain.get(value, 0) > 0:
                return REASON_POD_ANTI_AFFINITY
        if self.forbidden:
            for key, value in node.labels.items():
                if (key, value) in self.forbidden:
                    return REASON_EXISTING_ANTI_AFFINITY
        return None


# --- the actor -----------------------------------------------------------------------------------------


@dataclass
class SchedulerReport:
    bound: dict[str, str] = field(default_factory=dict)
    unschedulable: dict[str, str] = field(default_factory=dict)


def _needs_namespaces(pods: Iterable[Obj]) -> bool:
    for pod in pods:
        affinity = (pod.get("spec") or {}).get("affinity") or {}
        for kind in ("podAffinity", "podAntiAffinity"):
            for terms in (affinity.get(kind) or {}).values():
                for raw in terms or []:
                    term = raw.get("podAffinityTerm") or raw
                    selector = term.get("namespaceSelector")
                    if selector and (selector.get("matchLabels") or selector.get("matchExpressions")):
                        return True
    return False


def _mounts_claims(pod: Obj) -> bool:
    return any(v.get("persistentVolumeClaim") for v in (pod.get("spec") or {}).get("volumes") or [])


class Scheduler:
    """Binds pending pods to nodes, one pass per step; writes ``PodScheduled=False/Unschedulable`` for pods
    that fit nowhere, only when that condition changes."""

    def __init__(
        self,
        api_client: ApiClient,
        *,
        scoring: ScoringStrategy = "LeastAllocated",
        scheduler_name: str = DEFAULT_SCHEDULER_NAME,
        seed: int = 0,
        retry_interval: float = 60.0,
        store: Store | None = None,
    ) -> None:
        # Its LISTs from informers on ``store``'s change feed when given (``cluster/informer.py``).
        self._rest = InformedRest(api_client, store)
        self.scoring: ScoringStrategy = scoring
        self.scheduler_name = scheduler_name
        self._rng = random.Random(seed)
        self._retry_interval = retry_interval
        self.last_unschedulable: dict[str, str] = {}
        # uid -> (cluster fingerprint, time) of the last attempt that found no node; the pod is retried when
        # the cluster changes or retry_interval passes, as kube-scheduler's unschedulable queue does.
        self._parked: dict[str, tuple[int, datetime]] = {}
        # uid -> (resourceVersion, what the scheduler reads of the pod): see _signature.
        self._signatures: dict[str, tuple[str, str]] = {}

    def _is_ours(self, pod: Obj) -> bool:
        spec = pod.get("spec") or {}
        return (spec.get("schedulerName") or DEFAULT_SCHEDULER_NAME) == self.scheduler_name

    def step(self, now: datetime) -> SchedulerReport:
        report = SchedulerReport()
        pods = self._rest.list(pods_path())
        pending = [
            p
            for p in pods
            if not (p.get("spec") or {}).get("nodeName")
            and not is_deleting(p)
            and not is_terminal(p)
            and self._is_ours(p)
        ]
        pending_keys = {key_of(p) for p in pending}
        self.last_unschedulable = {k: v for k, v in self.last_unschedulable.items() if k in pending_keys}
        pending_uids = {uid_of(p) for p in pending}
        self._parked = {u: v for u, v in self._parked.items() if u in pending_uids}
        self._signatures = {u: v for u, v in self._signatures.items() if u in pending_uids}
        if not pending:
            return report
        nodes = self._rest.list(NODES_PATH)
        namespaces = self._rest.list("/api/v1/namespaces") if _needs_namespaces(pods) else []
        claims: list[Obj] = []
        volumes: list[Obj] = []
        if any(_mounts_claims(p) for p in pending):
            claims = self._rest.list("/api/v1/persistentvolumeclaims")
            volumes = self._rest.list("/api/v1/persistentvolumes")
        snapshot = ClusterSnapshot(
            nodes,
            pods,
            namespaces=namespaces,
            claims=claims,
            volumes=volumes,
            scoring=self.scoring,
            rng=self._rng,
        )
        fingerprint = _fingerprint(nodes, pods, claims, volumes)
        order = sorted(pending, key=lambda p: (-int((p.get("spec") or {}).get("priority") or 0), _created(p)))
        # A failed attempt's message by the pod's signature, until the next bind changes the snapshot: a pod
        # the scheduler reads the same as one that fit nowhere fits nowhere either, for the same reasons
        # (a ReplicaSet's pending pods). The filters are pure in (pod, snapshot); only a bind moves it.
        failed: dict[str, str] = {}
        for pod in order:
            if (pod.get("spec") or {}).get("schedulingGates"):
                self._set_pod_scheduled_false(pod, "SchedulingGated", SCHEDULING_GATED_MESSAGE, now)
                continue
            uid = uid_of(pod)
            parked = self._parked.get(uid)
            if (
                parked
                and parked[0] == fingerprint
                and (now - parked[1]).total_seconds() < self._retry_interval
            ):
                continue
            signature = self._signature(pod)
            message = failed.get(signature)
            if message is None:
                result = snapshot.schedule(snapshot.pod_info(pod), signature)
                if result.node_name is not None:
                    if self._bind(pod, result.node_name):
                        snapshot.assume(result.pod, result.node_name)
                        failed.clear()
                        report.bound[key_of(pod)] = result.node_name
                        self.last_unschedulable.pop(key_of(pod), None)
                        self._parked.pop(uid, None)
                    continue
                message = failed[signature] = result.message or NO_NODES_AVAILABLE
            self.last_unschedulable[key_of(pod)] = message
            report.unschedulable[key_of(pod)] = message
            self._parked[uid] = (fingerprint, now)
            self._set_pod_scheduled_false(pod, "Unschedulable", message, now)
        return report

    def _signature(self, pod: Obj) -> str:
        """Everything of ``pod`` its filters read: namespace, labels and spec (its name and uid are not
        read), remembered per resourceVersion."""
        uid, version = uid_of(pod), str(meta(pod).get("resourceVersion") or "")
        known = self._signatures.get(uid)
        if known is not None and known[0] == version:
            return known[1]
        signature = json.dumps(
            [namespace_of(pod), meta(pod).get("labels") or {}, pod.get("spec") or {}],
            sort_keys=True,
            default=str,
        )
        self._signatures[uid] = (version, signature)
        return signature

    def _bind(self, pod: Obj, node_name: str) -> bool:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name_of(pod), "namespace": namespace_of(pod), "uid": uid_of(pod)},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
        }
        try:
            self._rest.request("POST", pod_path(namespace_of(pod), name_of(pod), "binding"), body=body)
        except ApiException as err:
            if err.status in (404, 409):
                return False
            raise
        return True

    def _set_pod_scheduled_false(self, pod: Obj, reason: str, message: str, now: datetime) -> None:
        current = condition(pod, "PodScheduled")
        if (
            current is not None
            and current.get("status") == "False"
            and current.get("reason") == reason
            and current.get("message") == message
        ):
            return
        new = new_condition("PodScheduled", "False", now, reason, message)
        new["lastProbeTime"] = None
        if current is not None and current.get("status") == "False" and current.get("lastTransitionTime"):
            new["lastTransitionTime"] = current["lastTransitionTime"]
        conditions = with_condition((pod.get("status") or {}).get("conditions") or [], new)
        self._rest.patch(
            pod_path(namespace_of(pod), name_of(pod), "status"), {"status": {"conditions": conditions}}
        )


def _created(pod: Obj) -> tuple[str, str]:
    created = timestamp(pod)
    return (created.isoformat() if created else "", key_of(pod))


def _fingerprint(nodes: list[Obj], pods: list[Obj], claims: list[Obj], volumes: list[Obj]) -> int:
    """What, if unchanged, cannot turn an unschedulable pod schedulable."""
    node_part = frozenset((name_of(n), meta(n).get("resourceVersion"), is_node_ready(n)) for n in nodes)
    pod_part = frozenset(
        (uid_of(p), (p.get("spec") or {}).get("nodeName"), is_terminal(p), is_deleting(p))
        for p in pods
        if (p.get("spec") or {}).get("nodeName")
    )
    volume_part = frozenset((name_of(o), meta(o).get("resourceVersion")) for o in [*claims, *volumes])
    return hash((node_part, pod_part, volume_part))
