"""Pure builders for :mod:`lifecycle.adoption`: the record a NodeClaim object becomes.

Nothing here calls AWS or the API server; each function takes what was read and returns a value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from serverless_karpenter.adapters.providers.model import Instance
from serverless_karpenter.api import labels as wk
from serverless_karpenter.api.ec2nodeclass import EC2NODECLASS_HASH_VERSION, EC2NodeClass
from serverless_karpenter.api.nodeclaim import (
    CONDITION_INITIALIZED,
    CONDITION_LAUNCHED,
    CONDITION_REGISTERED,
    NodeClaim,
)
from serverless_karpenter.api.nodepool import NODEPOOL_HASH_VERSION, NodePool
from serverless_karpenter.clock import parse_rfc3339
from serverless_karpenter.lifecycle.model import InstanceTypeOption, NodeClaimRecord, NodeClaimState
from serverless_karpenter.provisioning.provisioner import from_templates
from serverless_karpenter.scheduling import resources
from serverless_karpenter.scheduling.requirements import Requirements
from serverless_karpenter.scheduling.scheduler import instance_type_mismatch, offering_filter

EC2NODECLASS_HASH_VERSION_KEY = "karpenter.k8s.aws/ec2nodeclass-hash-version"


def instance_id_of(provider_id: str | None) -> str | None:
    """``aws:///us-west-2a/i-0123`` -> ``i-0123`` (the provider's ParseInstanceID); None if not AWS's."""
    if not provider_id or not provider_id.startswith("aws://"):
        return None
    last = provider_id.rsplit("/", 1)[-1]
    return last if last.startswith("i-") else None


def nodepool_of(claim: NodeClaim) -> str:
    """Its NodePool: the label Karpenter sets, else the owner reference."""
    label = claim.metadata.labels.get(wk.NODEPOOL)
    if label:
        return label
    for owner in claim.metadata.owner_references:
        if owner.get("kind") == "NodePool" and owner.get("name"):
            return str(owner["name"])
    return ""


def state_of(claim: NodeClaim) -> NodeClaimState:
    """Our state for a launched claim, from Karpenter's conditions (Launched is implied by providerID)."""
    if claim.is_condition_true(CONDITION_INITIALIZED):
        return NodeClaimState.INITIALIZED
    if claim.is_condition_true(CONDITION_REGISTERED):
        return NodeClaimState.REGISTERED
    return NodeClaimState.LAUNCHED


def _since(claim: NodeClaim, condition_type: str) -> datetime | None:
    condition = claim.condition(condition_type)
    if condition is None or condition.status != "True" or not condition.last_transition_time:
        return None
    return parse_rfc3339(condition.last_transition_time)


def adopted_hash(
    claim: Mapping[str, str], owner: Mapping[str, str], hash_key: str, version_key: str, ours: str
) -> str:
    """The drift hash an adopted claim is recorded with.

    Karpenter drifts a claim whose hash differs from its owner's at the same hash version, and re-stamps
    (does not drift) one whose version differs. So: equal hashes, a version change, or nothing to compare
    mean "not drifted" (our hash of the owner as it is now); differing hashes at one version mean Karpenter
    saw it drifted, and the claim keeps its own hash, which ours never equals. Either is recorded with our
    hash version, so drift compares it with ours from now on."""
    claim_hash, owner_hash = claim.get(hash_key), owner.get(hash_key)
    if not claim_hash or not owner_hash or claim.get(version_key) != owner.get(version_key):
        return ours
    return ours if claim_hash == owner_hash else claim_hash


def option_for(catalog: Iterable[Any], instance: Instance) -> InstanceTypeOption | None:
    """The launched type as an option: its offerings, allocatable and capacity from the catalog."""
    for it in catalog:
        if it.name == instance.instance_type:
            return _option(it, it.offerings)
    return None


def _option(it: Any, offerings: Iterable[Any]) -> InstanceTypeOption:
    return InstanceTypeOption(
        name=it.name,
        arch=it.labels.get(wk.ARCH, "amd64"),
        offerings=sorted(((o.zone, o.capacity_type, o.price) for o in offerings), key=lambda o: o[2]),
        allocatable=dict(it.allocatable),
        capacity=dict(it.capacity),
    )


def requirement_dicts(claim: NodeClaim) -> list[dict[str, Any]]:
    return [r.model_dump(by_alias=True, exclude_none=True, mode="json") for r in claim.spec.requirements]


def _taints(taints: Sequence[Any]) -> list[dict[str, str]]:
    return [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in taints]


def _seconds(value: Any) -> float | None:
    return value.total_seconds() if value is not None else None


def adopted_record(
    claim: NodeClaim,
    instance: Instance,
    *,
    node_name: str | None,
    option: InstanceTypeOption | None,
    nodepool: NodePool | None,
    nodepool_annotations: Mapping[str, str],
    nodeclass: EC2NodeClass | None,
    nodeclass_annotations: Mapping[str, str],
    now: datetime,
) -> NodeClaimRecord:
    """The record of a claim Karpenter launched: its state, instance, spec and times as the object has
    them; the instance's own facts where a label is missing."""
    meta, status = claim.metadata, claim.status
    labels = dict(meta.labels)
    instance_type = labels.get(wk.INSTANCE_TYPE) or instance.instance_type
    zone = labels.get(wk.ZONE) or instance.zone
    capacity_type = labels.get(wk.CAPACITY_TYPE) or instance.capacity_type
    labels.update({wk.INSTANCE_TYPE: instance_type, wk.ZONE: zone, wk.CAPACITY_TYPE: capacity_type})
    nodepool_name = nodepool_of(claim)
    labels.setdefault(wk.NODEPOOL, nodepool_name)
    price = None
    if option is not None:
        price = next((p for z, ct, p in option.offerings if z == zone and ct == capacity_type), None)
    annotations = dict(meta.annotations)
    if nodepool is not None:
        annotations[wk.NODEPOOL_HASH] = adopted_hash(
            meta.annotations,
            nodepool_annotations,
            wk.NODEPOOL_HASH,
            wk.NODEPOOL_HASH_VERSION,
            nodepool.template_hash(),
        )
        annotations[wk.NODEPOOL_HASH_VERSION] = NODEPOOL_HASH_VERSION
    if nodeclass is not None:
        annotations[wk.EC2NODECLASS_HASH] = adopted_hash(
            meta.annotations,
            nodeclass_annotations,
            wk.EC2NODECLASS_HASH,
            EC2NODECLASS_HASH_VERSION_KEY,
            nodeclass.static_hash(),
        )
        annotations[EC2NODECLASS_HASH_VERSION_KEY] = EC2NODECLASS_HASH_VERSION
    created = parse_rfc3339(meta.creation_timestamp) if meta.creation_timestamp else instance.launch_time
    return NodeClaimRecord(
        name=claim.name,
        nodepool=nodepool_name,
        nodeclass=claim.spec.node_class_ref.name,
        state=state_of(claim),
        requirements=requirement_dicts(claim),
        instance_type_options=[option] if option is not None else [],
        requests=claim.parsed_requests(),
        capacity=claim.parsed_capacity() or (dict(option.capacity) if option else {}),
        allocatable=claim.parsed_allocatable() or (dict(option.allocatable) if option else {}),
        labels=labels,
        annotations=annotations,
        taints=_taints(claim.spec.taints),
        startup_taints=_taints(claim.spec.startup_taints),
        expire_after_seconds=_seconds(claim.expire_after_timedelta()),
        termination_grace_period_seconds=_seconds(claim.termination_grace_period_timedelta()),
        instance_id=instance.id,
        instance_type=instance_type,
        zone=zone,
        capacity_type=capacity_type,
        price_per_hour=price,
        provider_id=status.provider_id or instance.provider_id,
        image_id=status.image_id or instance.image_id,
        node_name=status.node_name or node_name,
        created_at=min(created, now),
        launched_at=_since(claim, CONDITION_LAUNCHED) or instance.launch_time,
        registered_at=_since(claim, CONDITION_REGISTERED),
        initialized_at=_since(claim, CONDITION_INITIALIZED),
    )


def launch_options(claim: NodeClaim, catalog: Iterable[Any]) -> list[InstanceTypeOption]:
    """What Karpenter's cloud provider would offer CreateFleet for a claim: the types meeting its
    requirements whose allocatable holds its requests, with the offerings it allows; cheapest first."""
    requirements = Requirements.from_node_selector_requirements(requirement_dicts(claim))
    requests = claim.parsed_requests()
    allowed = offering_filter(requirements)
    options = []
    for it in catalog:
        if instance_type_mismatch(requirements, it) is not None:
            continue
        if not resources.fits(requests, it.allocatable):
            continue
        offerings = [o for o in it.offerings if o.available and allowed(o)]
        if offerings:
            options.append(_option(it, offerings))
    return sorted(options, key=lambda o: (o.offerings[0][2], o.name))


def user_record(
    claim: NodeClaim,
    options: list[InstanceTypeOption],
    nodepool: NodePool | None,
    nodeclass: EC2NodeClass | None,
    now: datetime,
) -> NodeClaimRecord:
    """A Pending record for a claim a user created, to launch as any other."""
    requirements = requirement_dicts(claim)
    nodepool_name = nodepool_of(claim)
    labels = {
        **Requirements.from_node_selector_requirements(requirements).labels(),
        **claim.metadata.labels,
        wk.NODEPOOL: nodepool_name,
    }
    fields = from_templates(nodepool, nodeclass)
    fields["expire_after_seconds"] = _seconds(claim.expire_after_timedelta())
    fields["termination_grace_period_seconds"] = _seconds(claim.termination_grace_period_timedelta())
    fields["annotations"] = {**claim.metadata.annotations, **fields.get("annotations", {})}
    return NodeClaimRecord(
        name=claim.name,
        nodepool=nodepool_name,
        nodeclass=claim.spec.node_class_ref.name,
        requirements=requirements,
        instance_type_options=options,
        requests=claim.parsed_requests(),
        labels=labels,
        taints=_taints(claim.spec.taints),
        startup_taints=_taints(claim.spec.startup_taints),
        created_at=now,
        **fields,
    )


def annotations_of(manifest: Mapping[str, Any] | None) -> dict[str, str]:
    return dict(((manifest or {}).get("metadata") or {}).get("annotations") or {})


def node_hash_annotations(record: NodeClaimRecord) -> dict[str, str]:
    """The drift annotations a Node of this record carries: the record's hashes, with our versions."""
    keys = (wk.NODEPOOL_HASH, wk.NODEPOOL_HASH_VERSION, wk.EC2NODECLASS_HASH, EC2NODECLASS_HASH_VERSION_KEY)
    return {k: record.annotations[k] for k in keys if k in record.annotations}
