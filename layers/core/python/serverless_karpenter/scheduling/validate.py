"""Whether a placement is one the scheduler's own predicates accept: the check a later stage (the cost
solver) must pass before its NodeClaims replace the scheduler's.

A placement is replayed pod by pod in the order the scheduler placed the pods (``SchedulingResult.order``),
on a fresh :class:`~.scheduler.Scheduler` over the same NodePools and existing capacity, so the topology
counts start from the pods already bound and grow as the replay records each pod where the placement put
it. Each pod is checked on its node with the scheduler's checks, under the constraints the scheduler placed
it with: its preferences count as required unless the scheduler relaxed them (``SchedulingResult.states``,
the scheduler's own, their topology groups copied without counts into the replay's topology):

- taints (``taints.untolerated``), host ports (``hostports.conflict``) and node requirements
  (``Requirements.is_compatible``, then every instance type of the claim against the merged requirements);
- topology (spread, pod affinity and anti-affinity, both directions) with
  ``Scheduler.topology_narrowing`` against the counts so far, a new NodeClaim being the hostname domain
  of its own placeholder hostname;
- and, per new NodeClaim, that its pods' requests plus the DaemonSet overhead fit every instance type it
  carries, and that those types meet the claim's minValues.

Pods on existing capacity are replayed for their topology, taints, ports and labels, not their room (the
solver never moves them). Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from serverless_karpenter.api import labels as wk
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter.scheduling import resources
from serverless_karpenter.scheduling.daemonsets import DaemonGroup
from serverless_karpenter.scheduling.hostports import HostPort, conflict
from serverless_karpenter.scheduling.hostports import describe as describe_port
from serverless_karpenter.scheduling.preferences import PodState, prepare
from serverless_karpenter.scheduling.requirements import Requirement, Requirements
from serverless_karpenter.scheduling.scheduler import (
    ExistingCapacity,
    InstanceTypeLike,
    NewNodeClaim,
    NodePoolTemplate,
    Scheduler,
    SchedulingResult,
    has_own_zonal_anti_affinity,
    instance_type_mismatch,
)
from serverless_karpenter.scheduling.taints import untolerated
from serverless_karpenter.scheduling.topology import Topology, TopologyGroup
from serverless_karpenter.scheduling.volumes import VolumeIndex

# The hostname a new NodeClaim without one is counted under while replaying (unique per claim index).
_REPLAY_HOSTNAME = "replay-placeholder-{:05d}"


@dataclass(frozen=True, slots=True)
class Violation:
    pod: str  # pod key ("" for a NodeClaim-wide problem)
    node: str  # the existing capacity's name, or "nodeclaim <index>" of ``result.new_nodeclaims``
    reason: str
    claim: int | None = None  # the index of the new NodeClaim it is on, if any

    @property
    def rule(self) -> str:
        """The rule broken, without the numbers: a topology reason's group, or the kind of check."""
        return self.reason.split(": ", 1)[0]


def pod_states(
    pods: Sequence[Mapping[str, Any]],
    placed: Mapping[str, PodState],
    topology: Topology,
    *,
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
    volumes: VolumeIndex | None = None,
) -> list[PodState]:
    """Each pod's constraints as the scheduler placed it, its groups in ``topology``: the scheduler's own
    state where ``placed`` has it (relaxed as far as the pod needed), else the pod prepared afresh."""
    fresh: dict[int, TopologyGroup] = {}

    def rebind(groups: Sequence[TopologyGroup], *, inverse: bool = False) -> list[TopologyGroup]:
        out = []
        for group in groups:
            found = fresh.get(id(group))
            if found is None:
                # The same group with none of its state: every field with a factory (counts, occupied
                # and registered domains, cached rankings) starts empty, as in a fresh scheduler.
                copy = replace(group, **{name: factory() for name, factory in _STATE_FIELDS})
                found = fresh[id(group)] = topology.intern(copy, inverse=inverse)
            out.append(found)
        return out

    states = []
    for pod in pods:
        state = placed.get(podlib.key(pod))
        if state is None:
            states.append(prepare(pod, topology, namespace_labels=namespaces, volumes=volumes))
            continue
        # A shallow copy (``dataclasses.replace`` costs 4x as much, and there is one per pod), with its
        # groups swapped for the replay's; which groups count it is linked again in the replay.
        copy = object.__new__(PodState)
        values = dict(vars(state))
        for name in _GROUP_FIELDS:
            if values[name]:
                values[name] = rebind(values[name], inverse=name == "inverse_owned")
        values.update(counted_in=[], inverse_selecting=[], _view=None, _signature=None)
        vars(copy).update(values)
        states.append(copy)
    return states


_STATE_FIELDS: list[tuple[str, Callable[[], Any]]] = [
    (f.name, f.default_factory) for f in fields(TopologyGroup) if callable(f.default_factory)
]

# The PodState fields that hold its own topology groups (the rest are linked from the topology).
_GROUP_FIELDS = (
    "required_affinity",
    "required_anti",
    "preferred_affinity",
    "preferred_anti",
    "spreads",
    "spreads_anyway",
    "inverse_owned",
)


def daemon_groups_by_type(template: NodePoolTemplate) -> dict[int, DaemonGroup]:
    """The DaemonSet group (what the DaemonSets take of a node, and the host ports they bind) of each of
    the NodePool's instance types, by the type's id."""
    groups, of_type = template.daemon_groups()
    return {id(it): groups[g] for it, g in zip(template.instance_types, of_type, strict=True)}


def placement_order(result: SchedulingResult, states: Mapping[str, PodState]) -> list[str]:
    """The scheduler's placement order; for a result that does not carry it, its sort (largest cpu, then
    memory, first) with relaxed pods after the others, as its queue retries them."""
    placed = [k for c in result.new_nodeclaims for k in c.pods] + [
        k for keys in result.existing.values() for k in keys
    ]
    known = set(placed)
    if result.order and known <= set(result.order):
        return [k for k in result.order if k in known]

    def sort_key(key: str) -> tuple[int, int, int, str]:
        state = states.get(key)
        if state is None:
            return (0, 0, 0, key)
        return (
            len(state.relaxed),
            -state.requests.get(resources.CPU, 0),
            -state.requests.get(resources.MEMORY, 0),
            key,
        )

    return sorted(known, key=sort_key)


class Replay:
    """The scheduler's predicates over whole placements of one set of pods: the pods' constraints (the
    scheduler's ``states`` where given, see :func:`pod_states`) are bound to the replay's topology once,
    and each :meth:`violations` call replays a placement on fresh counts. ``self.states`` are those
    constraints, for the solver to keep."""

    def __init__(
        self,
        pods: Sequence[Mapping[str, Any]],
        templates: Sequence[NodePoolTemplate],
        existing: Sequence[ExistingCapacity] = (),
        *,
        states: Mapping[str, PodState] | None = None,
        namespaces: Mapping[str, Mapping[str, str]] | None = None,
        volumes: VolumeIndex | None = None,
    ) -> None:
        # Fresh capacity: the scheduler that placed the pods has used up the room of the objects it had.
        fresh = [replace(c, pods=[], available=dict(c.available)) for c in existing]
        self.templates = list(templates)
        self.scheduler = Scheduler(self.templates, fresh, namespaces=namespaces, volumes=volumes)
        self.states = {
            s.key: s
            for s in pod_states(
                pods, states or {}, self.scheduler.topology, namespaces=namespaces, volumes=volumes
            )
        }
        # ``instance_type_mismatch`` by requirements and type: claims share a few requirement sets.
        self._mismatch: dict[Requirements, dict[int, str | None]] = {}
        self._groups: dict[str, dict[int, DaemonGroup]] = {}
        self._mismatch_lists: dict[tuple[Requirements, tuple[int, ...]], str | None] = {}
        self._by_types: dict[
            tuple[str, tuple[int, ...]], list[tuple[DaemonGroup, list[InstanceTypeLike], dict[str, int]]]
        ] = {}

    def _reset(self) -> None:
        topology = self.scheduler.topology
        for group in (*topology.groups, *topology.inverse_groups):
            group.counts = dict.fromkeys(group.counts, 0)
            group.occupied.clear()
            group.rankings.clear()

    def _type_groups(
        self, claim: NewNodeClaim, pool: NodePoolTemplate | None
    ) -> list[tuple[DaemonGroup, list[InstanceTypeLike], dict[str, int]]]:
        """A claim's types by DaemonSet group, with the least allocatable of each resource among them;
        cached by the list of types (repacked nodes of one shape share theirs)."""
        key = (pool.name if pool is not None else "", tuple(map(id, claim.instance_types)))
        found = self._by_types.get(key)
        if found is None:
            groups = self._daemon_groups(pool) if pool is not None else {}
            fallback = DaemonGroup(dict(claim.daemon_overhead), frozenset())
            by_group: dict[int, tuple[DaemonGroup, list[InstanceTypeLike]]] = {}
            shared = True  # no type charged the claim's own overhead
            for it in claim.instance_types:
                group = groups.get(id(it))
                if group is None:
                    group, shared = fallback, False
                by_group.setdefault(id(group), (group, []))[1].append(it)
            found = []
            for group, types in by_group.values():
                names = {name for it in types for name in it.allocatable}
                least = {name: min(it.allocatable.get(name, 0) for it in types) for name in names}
                found.append((group, types, least))
            if shared:
                self._by_types[key] = found
        return found

    def _daemon_groups(self, pool: NodePoolTemplate) -> dict[int, DaemonGroup]:
        found = self._groups.get(pool.name)
        if found is None:
            found = self._groups[pool.name] = daemon_groups_by_type(pool)
        return found

    def _first_mismatch(self, requirements: Requirements, types: Sequence[InstanceTypeLike]) -> str | None:
        """The first of ``types`` that cannot satisfy ``requirements``, and why; None when all can.
        Answered once per requirements and list of types, and per requirements and type."""
        list_key = (requirements, tuple(map(id, types)))
        if list_key in self._mismatch_lists:
            return self._mismatch_lists[list_key]
        known = self._mismatch.setdefault(requirements, {})
        answer = None
        for it in types:
            key = id(it)
            if key in known:
                mismatch = known[key]
            else:
                mismatch = known[key] = instance_type_mismatch(requirements, it)
            if mismatch is not None:
                answer = f"instance type {it.name}: {mismatch}"
                break
        self._mismatch_lists[list_key] = answer
        return answer

    def violations(
        self,
        result: SchedulingResult,
        *,
        claims: Collection[int] | None = None,
        fixed: Collection[int] = (),
        only: Collection[str] | None = None,
    ) -> list[Violation]:
        """What in ``result`` the scheduler's predicates refuse (empty: every placement holds).

        ``claims`` limits the node-local checks (taints, ports, requirements, room) to those new
        NodeClaims (indexes into ``result.new_nodeclaims``); topology is checked for every pod, since
        counts are shared, unless ``only`` names the pods whose topology is wanted (every pod is still
        counted). A pod placed twice, or a pod neither placed nor reported unschedulable, is a
        violation.

        A NodeClaim the scheduler built grew its requirements pod by pod, and a pod counted in a zone
        only once its claim was narrowed to that zone; the replay grows it again from its NodePool's
        requirements, so the counts are the scheduler's. The claims in ``fixed`` were decided whole (the
        solver's; or all, to count every pod where its node will be): their requirements hold from their
        first pod on."""
        self._reset()
        scheduler = self.scheduler
        topology = scheduler.topology
        states = self.states
        out: list[Violation] = []
        entries = {e.capacity.name: e for e in scheduler.register_existing(list(states.values()))}

        where: dict[str, int] = {}  # pod key -> index of its new NodeClaim
        for index, claim in enumerate(result.new_nodeclaims):
            for key in claim.pods:
                if key in where:
                    out.append(
                        Violation(key, f"nodeclaim {index}", "placement: pod placed more than once", index)
                    )
                where[key] = index
        existing_of: dict[str, str] = {}
        for name, keys in result.existing.items():
            for key in keys:
                if key in where or key in existing_of:
                    out.append(Violation(key, name, "placement: pod placed more than once"))
                existing_of[key] = name
        for key in states:
            if key not in where and key not in existing_of and key not in result.unschedulable:
                out.append(Violation(key, "", "placement: pod neither placed nor unschedulable"))

        hostnames: list[str] = []
        requirements: list[Requirements] = []
        ports: list[set[HostPort]] = []
        pools = {t.name: t for t in self.templates}
        for index, claim in enumerate(result.new_nodeclaims):
            hostname = claim.hostname or _REPLAY_HOSTNAME.format(index)
            hostnames.append(hostname)
            ports.append(set())
            topology.register_domain(wk.HOSTNAME, hostname, claim.taints)
            pool = pools.get(claim.nodepool)
            node = f"nodeclaim {index}"
            if pool is None:
                out.append(Violation("", node, f'nodepool: no nodepool "{claim.nodepool}"', index))
            elif not pool.requirements.is_compatible(claim.requirements):
                out.append(Violation("", node, "nodepool: requirements outside its nodepool's", index))
            grows = pool is not None and index not in fixed
            requirements.append(pool.requirements if grows and pool is not None else claim.requirements)
        hostname_requirements = [Requirement(wk.HOSTNAME, "In", (h,)) for h in hostnames]
        opened: set[int] = set()
        # Claims and pods share a few requirement sets: each pair is merged once.
        merges: dict[tuple[Requirements, Requirements], Requirements | None] = {}
        checked = set(range(len(result.new_nodeclaims))) if claims is None else set(claims)
        # Pods of a claim mostly share their requirements: its types are checked once per merged set.
        type_checks: dict[tuple[int, Requirements], str | None] = {}

        for key in placement_order(result, states):
            state = states.get(key)
            if state is None:
                continue
            on = existing_of.get(key)
            if on is not None:
                entry = entries.get(on)
                if entry is None:
                    out.append(Violation(key, on, "placement: no such existing capacity"))
                    continue
                reason = (
                    _existing_reason(scheduler, entry.domains, entry.capacity, entry.host_ports, state)
                    if only is None or key in only
                    else None
                )
                if reason is not None:
                    out.append(Violation(key, on, reason))
                entry.host_ports.update(state.host_ports)
                scheduler.record_placement(state, entry.domains, entry.capacity.taints, exact=True)
                continue
            index = where[key]
            claim = result.new_nodeclaims[index]
            node = f"nodeclaim {index}"
            current = requirements[index]
            if index in fixed and index not in checked:
                # A claim neither grown nor checked here: its requirements stand for the node.
                merged: Requirements | None = current
            else:
                node_requirements = state.node_requirements()
                merge_key = (current, node_requirements)
                if merge_key in merges:
                    merged = merges[merge_key]
                else:
                    compatible = current.is_compatible(node_requirements)
                    merged = merges[merge_key] = current.merged(node_requirements) if compatible else None
            if index in checked:
                reason = self._claim_reason(claim, ports[index], state, merged, type_checks)
                if reason is not None:
                    out.append(Violation(key, node, reason, index))
            if merged is None:
                merged = current
            if state.topology_groups() and (only is None or key in only):
                narrowed = scheduler.topology_narrowing(state, merged, merged, hostname_requirements[index])
                if isinstance(narrowed, str):
                    out.append(Violation(key, node, narrowed, index))
                elif len(narrowed):
                    merged = merged.merged(narrowed)
            if index not in opened:
                opened.add(index)
                if index not in fixed and has_own_zonal_anti_affinity(state):
                    # The scheduler commits the claim a pod with its own zonal anti-affinity opens to
                    # one zone (``_commit_to_zone``): the claim's final one.
                    merged = merged.add(claim.requirements.get(wk.ZONE))
            requirements[index] = merged
            ports[index].update(state.host_ports)
            scheduler.record_placement(state, merged, claim.taints, exact=False, hostname=hostnames[index])

        for index in sorted(checked):
            if index < len(result.new_nodeclaims):
                claim = result.new_nodeclaims[index]
                pool = pools.get(claim.nodepool)
                reason = self._room_reason(claim, requirements[index], pool, ports[index])
                if reason is not None:
                    out.append(Violation("", f"nodeclaim {index}", reason, index))
        return out

    def _claim_reason(
        self,
        claim: NewNodeClaim,
        used_ports: set[HostPort],
        state: PodState,
        merged: Requirements | None,
        type_checks: dict[tuple[int, Requirements], str | None],
    ) -> str | None:
        taint = untolerated(
            state.tolerations, claim.taints, include_prefer_no_schedule=not state.tolerate_prefer_no_schedule
        )
        if taint is not None:
            return f"taints: did not tolerate {taint}"
        clash = conflict(state.host_ports, used_ports) if state.host_ports else None
        if clash is not None:
            return f"host ports: {describe_port(clash)} is taken on the node"
        if merged is None:
            return f"node requirements: {state.node_requirements()} not compatible with the node's"
        # The claim may launch as any of its types, so each must satisfy the pod (as the scheduler keeps
        # only the types compatible with every pod's merged requirements).
        cache_key = (id(claim), merged)
        if cache_key not in type_checks:
            mismatch = self._first_mismatch(merged, claim.instance_types)
            type_checks[cache_key] = None if mismatch is None else f"node requirements: {mismatch}"
        return type_checks[cache_key]

    def _room_reason(
        self,
        claim: NewNodeClaim,
        requirements: Requirements,
        pool: NodePoolTemplate | None,
        pod_ports: set[HostPort],
    ) -> str | None:
        if not claim.instance_types:
            return "resources: no instance type"
        states = self.states
        pods = resources.merge(*(states[k].requests if k in states else {} for k in claim.pods))
        # Each type must hold the pods beside what its own DaemonSets take (their group), and its
        # DaemonSets must not bind a port a pod here binds; a type outside the NodePool's list (or no
        # NodePool) is charged the claim's own overhead.
        for group, types, least in self._type_groups(claim, pool):
            if pod_ports and group.host_ports:
                clash = conflict(pod_ports, group.host_ports)
                if clash is not None:
                    return f"host ports: {describe_port(clash)} is bound by a DaemonSet on {types[0].name}"
            total = resources.merge(pods, group.overhead)
            # Fitting every type is fitting the least each type has of each resource.
            if not resources.fits(total, least):
                it = next(it for it in types if not resources.fits(total, it.allocatable))
                return (
                    f"resources: requests {resources.format_list(total)} do not fit instance type {it.name}"
                )
        mismatch = self._first_mismatch(requirements, claim.instance_types)
        if mismatch is not None:
            return f"node requirements: {mismatch}"
        if requirements.has_min_values():
            shortfall = requirements.check_min_values(it.labels for it in claim.instance_types)
            if shortfall is not None:
                return f"minValues: {shortfall}"
        return None


def violations(
    result: SchedulingResult,
    pods: Sequence[Mapping[str, Any]],
    templates: Sequence[NodePoolTemplate],
    existing: Sequence[ExistingCapacity] = (),
    *,
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
    volumes: VolumeIndex | None = None,
    claims: Collection[int] | None = None,
    fixed: Collection[int] = (),
) -> list[Violation]:
    """:meth:`Replay.violations` of one result, its pods constrained as ``result.states`` says."""
    replay = Replay(pods, templates, existing, states=result.states, namespaces=namespaces, volumes=volumes)
    return replay.violations(result, claims=claims, fixed=fixed)


def _existing_reason(
    scheduler: Scheduler,
    domains: Requirements,
    capacity: ExistingCapacity,
    used_ports: set[HostPort],
    state: PodState,
) -> str | None:
    taint = untolerated(state.tolerations, capacity.taints, include_prefer_no_schedule=False)
    if taint is not None:
        return f"taints: did not tolerate {taint}"
    clash = conflict(state.host_ports, used_ports) if state.host_ports else None
    if clash is not None:
        return f"host ports: {describe_port(clash)} is taken on the node"
    node_requirements = state.node_requirements()
    if capacity.requirements is not None:
        if not capacity.requirements.is_compatible(node_requirements):
            return "node requirements: not compatible"
    else:
        mismatch = node_requirements.matches_labels(domains.single_valued_labels())
        if mismatch is not None:
            return f"node requirements: {mismatch}"
    if state.topology_groups():
        narrowed = scheduler.topology_narrowing(state, domains, domains, None)
        if isinstance(narrowed, str):
            return narrowed
    return None
