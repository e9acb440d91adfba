"""Which pods may share a node: the per-node limits that hostname anti-affinity, spread and host ports
impose, read from the scheduler's own view of each pod (``PodState``, relaxed as the scheduler relaxed
it, see ``scheduling/validate.py``).

The scheduler treats a preference as required until it must relax it, so every preference the
scheduler did not relax is a constraint here too, exactly as a required one: preferred pod
(anti-)affinity, ScheduleAnyway spreads and the heaviest preferred node affinity term (which is part of
the pod's node requirements, so of its claim's). A relaxed preference is gone from the state, so the
solver may move its pod without it.

The solver repacks pods onto new nodes, so it must keep every constraint that depends on which pods
share a node. It models each as a *class*: the pods a term's group selects (members) and the pods
that carry the term (owners). A node holding an owner may hold at most ``cap`` pods of the class:

- pod anti-affinity on ``kubernetes.io/hostname``: cap 1 (an owner and a matching pod never share a
  node; the kube-scheduler checks both directions for required terms, and for preferred ones being
  stricter is safe);
- topology spread on ``kubernetes.io/hostname``: cap ``maxSkew``. With at most ``maxSkew`` matching
  pods on each new node, every placement keeps the skew within ``maxSkew`` whatever the other nodes
  hold, so the rule is safe (if sometimes stricter than needed);
- a host port (protocol and number): cap 1, every pod that binds it both owner and member (stricter
  than the kube-scheduler, which lets two specific host IPs share a port).

Only members count toward a cap. An owner its own selector does not match (app=web against app=db) is
not a member, so such owners may share a node with each other; under anti-affinity they must not share
one with any member, so they own a class of their own with the same group and cap 0.

Zonal constraints are kept by never moving a pod out of the zone set its NodeClaim had, when the pod
carries a zonal term (spread, affinity or anti-affinity on a zone key) or some pod's zonal term selects
it: the scheduler counted it in that zone. Every other pod may go to any zone its own node requirements
allow, so it can fill a node the zonal pods pinned to any zone. Constraints the solver cannot keep
while moving pods (hostname pod affinity, other topology keys) make the pod *pinned*: its NodeClaim
stays as the first-fit scheduler made it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from serverless_karpenter.api import labels as wk
from serverless_karpenter.scheduling.preferences import PodState
from serverless_karpenter.scheduling.topology import TopologyGroup

ZONAL_KEYS = frozenset({wk.ZONE, wk.ZONE_ID, "failure-domain.beta.kubernetes.io/zone"})


@dataclass(frozen=True, slots=True)
class NodeClass:
    """A per-node class: at most ``cap`` of its members on a node that holds one of its owners.

    Its members are the pods ``group`` selects (groups are interned by the scheduler's topology, so
    pods sharing a term share the object), or the pods binding host port ``port``."""

    group: TopologyGroup | None
    cap: int
    # Anti-affinity and host ports: its owners that are members must each have a node of their own (a
    # true bound on the node count). Spread caps are the solver's own safe reading, so they bound nothing.
    exclusive: bool = False
    port: tuple[str, int] | None = None  # (protocol, number)

    def selects(self, state: PodState) -> bool:
        if self.group is None:
            return any((protocol, number) == self.port for protocol, _, number in state.host_ports)
        return self.group.selects(state.namespace, state.labels)

    def for_outsiders(self) -> NodeClass:
        """The class an owner its selector does not match owns instead: under anti-affinity it may sit
        beside no member at all, while a spread still allows ``cap`` members beside it."""
        return NodeClass(self.group, self.cap - 1, port=self.port) if self.exclusive else self


@dataclass(frozen=True, slots=True)
class PodConstraints:
    owned: tuple[NodeClass, ...]
    pinned_reason: str | None
    # The pod's own zonal groups; a pod with any keeps its claim's zones, as does a pod they select.
    zonal: tuple[TopologyGroup, ...] = ()


def pod_constraints(state: PodState) -> PodConstraints:
    """The per-node classes a pod owns, or why it must stay where the first-fit scheduler put it."""
    owned: list[NodeClass] = []
    zonal: list[TopologyGroup] = []
    for group in (*state.required_affinity, *state.preferred_affinity):
        if group.key not in ZONAL_KEYS:
            return PodConstraints((), f"pod affinity on {group.key}")
        zonal.append(group)
    for group in (*state.required_anti, *state.preferred_anti):
        if group.key == wk.HOSTNAME:
            owned.append(NodeClass(group, 1, exclusive=True))
        elif group.key in ZONAL_KEYS:
            zonal.append(group)
        else:
            return PodConstraints((), f"pod anti-affinity on {group.key}")
    for group in (*state.spreads, *state.spreads_anyway):
        if group.key == wk.HOSTNAME:
            owned.append(NodeClass(group, max(1, group.max_skew)))
        elif group.key in ZONAL_KEYS:
            zonal.append(group)
        else:
            return PodConstraints((), f"topology spread on {group.key}")
    for protocol, number in sorted({(protocol, number) for protocol, _, number in state.host_ports}):
        owned.append(NodeClass(None, 1, exclusive=True, port=(protocol, number)))
    return PodConstraints(tuple(owned), None, tuple(zonal))


def zone_bound(states: Sequence[PodState], constraints: Sequence[PodConstraints]) -> list[bool]:
    """Per pod: must it stay in its claim's zones (it has a zonal term, or a zonal term selects it)?"""
    groups = {id(g): g for c in constraints for g in c.zonal}.values()
    out = []
    for state, c in zip(states, constraints, strict=True):
        if c.zonal:
            out.append(True)
            continue
        out.append(any(g.selects(state.namespace, state.labels) for g in groups))
    return out


def memberships(
    states: Sequence[PodState], constraints: Sequence[PodConstraints]
) -> tuple[list[NodeClass], list[tuple[tuple[int, bool, bool], ...]]]:
    """Every class, and per pod the classes it belongs to as (class index, is owner, is member)."""
    classes: list[NodeClass] = []
    index: dict[NodeClass, int] = {}
    owned_by: list[set[int]] = []
    for state, c in zip(states, constraints, strict=True):
        owned: set[int] = set()
        for term in c.owned:
            cls = term if term.selects(state) else term.for_outsiders()
            if cls not in index:
                index[cls] = len(classes)
                classes.append(cls)
            owned.add(index[cls])
        owned_by.append(owned)
    # Members by the pod's labels (and ports): pods of a Deployment share them, so each is matched once.
    member_cache: dict[tuple[object, ...], set[int]] = {}
    out: list[tuple[tuple[int, bool, bool], ...]] = []
    for state, owned in zip(states, owned_by, strict=True):
        signature = (state.namespace, tuple(sorted(state.labels.items())), state.host_ports)
        member = member_cache.get(signature)
        if member is None:
            member = member_cache[signature] = {i for i, cls in enumerate(classes) if cls.selects(state)}
        out.append(tuple(sorted((i, i in owned, i in member) for i in owned | member)))
    return classes, out
