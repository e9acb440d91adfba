"""EC2NodeClass (karpenter.k8s.aws/v1, cluster-scoped): how instances are launched on EC2."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, NamedTuple, Self

from pydantic import AfterValidator, Field, field_validator, model_validator

from serverless_karpenter.api import labels
from serverless_karpenter.api.common import (
    Bool,
    Condition,
    GoDuration,
    Int,
    LenientModel,
    NodeSelectorRequirement,
    ObjectMeta,
    Quantity,
    ResourceModel,
    SpecModel,
    at_least,
    between,
    find_condition,
    omitempty,
    quantity_map_problems,
    quantity_problem,
    stable_hash,
)
from serverless_karpenter.api.errors import Loc, RuleError, raise_problems, show

# See NODEPOOL_HASH_VERSION: ours, so Karpenter-stamped NodeClaims are re-stamped rather than drifted.
EC2NODECLASS_HASH_VERSION = "sk-v1"

AMIFamily = Literal["AL2", "AL2023", "Bottlerocket", "Windows2019", "Windows2022", "Custom"]
AMI_FAMILY_CUSTOM = "Custom"
# Alias family (as written in ``family@version``) to the AMI family it implies.
ALIAS_FAMILIES: dict[str, str] = {
    "al2": "AL2",
    "al2023": "AL2023",
    "bottlerocket": "Bottlerocket",
    "windows2019": "Windows2019",
    "windows2022": "Windows2022",
}
ALIAS_VERSION_LATEST = "latest"


def ami_family_for(ami_family: str | None, alias: str | None) -> str:
    """The AMI family that shapes user data and default block devices: Karpenter's
    ``EC2NodeClass.AMIFamily()``. ``spec.amiFamily`` wins when set (it may be 'Custom' beside an alias),
    else the family the alias (``al2023@latest``, or only its family part) implies, else 'Custom'.
    The one rule: the model, the live resolver and ``plan`` all call it."""
    if ami_family:
        return ami_family
    if alias:
        return ALIAS_FAMILIES.get(alias.partition("@")[0], AMI_FAMILY_CUSTOM)
    return AMI_FAMILY_CUSTOM


def spec_ami_family(spec: Mapping[str, Any]) -> str:
    """:func:`ami_family_for` of an EC2NodeClass spec as a plain dict (the resolver reads those)."""
    alias = next((str(t["alias"]) for t in spec.get("amiSelectorTerms") or () if t.get("alias")), None)
    return ami_family_for(spec.get("amiFamily"), alias)


MAX_SELECTOR_TERMS = 30
MAX_SELECTOR_TAGS = 20
MAX_BLOCK_DEVICE_MAPPINGS = 50

RESERVED_RESOURCE_NAMES = frozenset({"cpu", "memory", "ephemeral-storage", "pid"})
EVICTION_SIGNALS = frozenset(
    {
        "memory.available",
        "nodefs.available",
        "nodefs.inodesFree",
        "imagefs.available",
        "imagefs.inodesFree",
        "pid.available",
    }
)
_EVICTION_PERCENT = re.compile(r"^(\d{1,2}(\.\d{1,2})?|100(\.0{1,2})?)%$")
_ALIAS = re.compile(r"^[a-zA-Z0-9]+@.+$")
_ALIAS_VERSION = re.compile(r"^v\d+(\.\d+)*$")
_VOLUME_SIZE = re.compile(r"^([0-9]+)(Gi|G|Ti|T)$")
# The largest EBS volume, in each unit Karpenter's CRD accepts.
_VOLUME_SIZE_MAX = {"Gi": 59000, "G": 64000, "Ti": 58, "T": 64}

VolumeType = Literal["standard", "io1", "io2", "gp2", "sc1", "st1", "gp3"]


def _selector_tag_problems(tags: dict[str, str]) -> list[tuple[Loc, str]]:
    problems: list[tuple[Loc, str]] = []
    if len(tags) > MAX_SELECTOR_TAGS:
        problems.append(((), f"must have at most {MAX_SELECTOR_TAGS} tags (got {len(tags)})"))
    for key, value in tags.items():
        if not key:
            problems.append(((key,), "empty tag keys are not supported"))
        elif not value:
            problems.append(((key,), "empty tag values are not supported; use '*' to match any value"))
    return problems


def _check_selector_tags(tags: dict[str, str] | None) -> dict[str, str] | None:
    if tags is not None:
        raise_problems(_selector_tag_problems(tags))
    return tags


SelectorTags = Annotated[dict[str, str], AfterValidator(_check_selector_tags)]


def _pattern(regex: str, example: str) -> AfterValidator:
    compiled = re.compile(regex)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise RuleError(f"must look like {example} (got {show(value)})")
        return value

    return AfterValidator(check)


def _set_fields(term: SpecModel, names: tuple[str, ...]) -> list[str]:
    """The manifest names of the ``names`` fields that are set on ``term``."""
    out = []
    for name in names:
        if getattr(term, name) is not None:
            out.append(type(term).model_fields[name].alias or name)
    return out


def _exclusive(term: SpecModel, field_name: str, others: tuple[str, ...], where: str) -> None:
    if getattr(term, field_name) is None:
        return
    clash = _set_fields(term, others)
    if clash:
        alias = type(term).model_fields[field_name].alias or field_name
        raise RuleError(
            f"'{alias}' cannot be combined with {', '.join(repr(c) for c in clash)} in {where}", at=(alias,)
        )


def _require_one(term: SpecModel, names: tuple[str, ...]) -> None:
    if not _set_fields(term, names):
        aliases = [type(term).model_fields[n].alias or n for n in names]
        raise RuleError(f"must set at least one of {', '.join(aliases)}")


# --- selector terms -----------------------------------------------------------------------------------


class SubnetSelectorTerm(SpecModel):
    """Subnets with all these tags, or the subnet with this id."""

    tags: SelectorTags | None = None
    id: Annotated[str, _pattern(r"^subnet-[0-9a-z]+$", "subnet-0123456789abcdef0")] | None = None

    @model_validator(mode="after")
    def _one_way(self) -> Self:
        _require_one(self, ("tags", "id"))
        _exclusive(self, "id", ("tags",), "a subnet selector term")
        return self


class SecurityGroupSelectorTerm(SpecModel):
    """Security groups with all these tags, or the group with this id, or with this name."""

    tags: SelectorTags | None = None
    id: Annotated[str, _pattern(r"^sg-[0-9a-z]+$", "sg-0123456789abcdef0")] | None = None
    name: str | None = None

    @model_validator(mode="after")
    def _one_way(self) -> Self:
        _require_one(self, ("tags", "id", "name"))
        _exclusive(self, "id", ("tags", "name"), "a security group selector term")
        _exclusive(self, "name", ("tags", "id"), "a security group selector term")
        return self


class CapacityReservationSelectorTerm(SpecModel):
    """Capacity reservations with these tags (optionally of one owner), or the one with this id."""

    tags: SelectorTags | None = None
    id: Annotated[str, _pattern(r"^cr-[0-9a-z]+$", "cr-0123456789abcdef0")] | None = None
    owner_id: Annotated[str, _pattern(r"^[0-9]{12}$", "a 12-digit AWS account id")] | None = Field(
        default=None, alias="ownerID"
    )
    instance_match_criteria: Literal["open", "targeted"] | None = None

    @model_validator(mode="after")
    def _one_way(self) -> Self:
        _require_one(self, ("tags", "id", "instance_match_criteria"))
        _exclusive(
            self,
            "id",
            ("tags", "owner_id", "instance_match_criteria"),
            "a capacity reservation selector term",
        )
        return self


class AMIAlias(NamedTuple):
    """An alias term split up: ``al2023@latest`` is ``AMIAlias(family="AL2023", version="latest")``."""

    family: str
    version: str


def _check_alias(alias: str) -> str:
    if len(alias) > 30:
        raise RuleError(f"must be at most 30 characters (got {len(alias)})")
    if not _ALIAS.fullmatch(alias):
        raise RuleError(f"must have the form family@version, such as al2023@latest (got {show(alias)})")
    family, _, version = alias.partition("@")
    if family not in ALIAS_FAMILIES:
        raise RuleError(f"family must be one of {', '.join(ALIAS_FAMILIES)} (got {show(family)})")
    if family.startswith("windows") and version != ALIAS_VERSION_LATEST:
        raise RuleError(f"windows families only support the version 'latest' (got {show(alias)})")
    if version != ALIAS_VERSION_LATEST and not _ALIAS_VERSION.fullmatch(version):
        raise RuleError(
            f"version must be 'latest' or a release such as v20240625 (or v1.10.0 for bottlerocket) "
            f"(got {show(version)})"
        )
    return alias


class AMISelectorTerm(SpecModel):
    """An EKS-optimized alias (``al2023@latest``), or AMIs by tags, id, name, owner or SSM parameter."""

    alias: Annotated[str, AfterValidator(_check_alias)] | None = None
    tags: SelectorTags | None = None
    id: Annotated[str, _pattern(r"^ami-[0-9a-z]+$", "ami-0123456789abcdef0")] | None = None
    name: str | None = None
    owner: str | None = None
    ssm_parameter: str | None = None

    @model_validator(mode="after")
    def _one_way(self) -> Self:
        _require_one(self, ("alias", "tags", "id", "name", "ssm_parameter"))
        _exclusive(self, "id", ("alias", "tags", "name", "owner"), "an AMI selector term")
        _exclusive(self, "alias", ("id", "tags", "name", "owner", "ssm_parameter"), "an AMI selector term")
        return self

    def parsed_alias(self) -> AMIAlias | None:
        if self.alias is None:
            return None
        family, _, version = self.alias.partition("@")
        return AMIAlias(ALIAS_FAMILIES[family], version)


# --- kubelet ------------------------------------------------------------------------------------------


def _eviction_problems(thresholds: dict[str, str]) -> list[tuple[Loc, str]]:
    problems: list[tuple[Loc, str]] = []
    for signal, threshold in thresholds.items():
        if signal not in EVICTION_SIGNALS:
            problems.append(
                ((signal,), f"is not an eviction signal; use one of: {', '.join(sorted(EVICTION_SIGNALS))}")
            )
        elif not _EVICTION_PERCENT.fullmatch(threshold) and quantity_problem(threshold):
            problems.append(
                (
                    (signal,),
                    f"must be a percentage such as 10% or a quantity such as 500Mi (got {show(threshold)})",
                )
            )
    return problems


class KubeletConfiguration(SpecModel):
    """The subset of kubelet settings Karpenter passes to the node (and accounts for in allocatable)."""

    cluster_dns: list[str] = omitempty(list, alias="clusterDNS")
    max_pods: Annotated[Int, at_least(0)] | None = None
    pods_per_core: Annotated[Int, at_least(0)] | None = None
    system_reserved: dict[str, Quantity] = omitempty(dict)
    kube_reserved: dict[str, Quantity] = omitempty(dict)
    eviction_hard: dict[str, str] = omitempty(dict)
    eviction_soft: dict[str, str] = omitempty(dict)
    eviction_soft_grace_period: dict[str, GoDuration] = omitempty(dict)
    eviction_max_pod_grace_period: Int | None = None
    image_gc_high_threshold_percent: Annotated[Int, between(0, 100)] | None = Field(
        default=None, alias="imageGCHighThresholdPercent"
    )
    image_gc_low_threshold_percent: Annotated[Int, between(0, 100)] | None = Field(
        default=None, alias="imageGCLowThresholdPercent"
    )
    cpu_cfs_quota: Bool | None = Field(default=None, alias="cpuCFSQuota")

    @field_validator("cluster_dns")
    @classmethod
    def _dns_are_ips(cls, servers: list[str]) -> list[str]:
        problems: list[tuple[Loc, str]] = []
        for index, server in enumerate(servers):
            try:
                ipaddress.ip_address(server)
            except ValueError:
                problems.append(((index,), f"must be an IP address (got {show(server)})"))
        raise_problems(problems)
        return servers

    @field_validator("system_reserved", "kube_reserved")
    @classmethod
    def _reserved_valid(cls, reserved: dict[str, Any]) -> dict[str, Any]:
        raise_problems(
            quantity_map_problems(reserved, allowed_names=RESERVED_RESOURCE_NAMES, non_negative=True)
        )
        return reserved

    @field_validator("eviction_hard", "eviction_soft")
    @classmethod
    def _eviction_valid(cls, thresholds: dict[str, str]) -> dict[str, str]:
        raise_problems(_eviction_problems(thresholds))
        return thresholds

    @field_validator("eviction_soft_grace_period")
    @classmethod
    def _grace_signals(cls, periods: dict[str, str]) -> dict[str, str]:
        raise_problems(
            [
                ((signal,), f"is not an eviction signal; use one of: {', '.join(sorted(EVICTION_SIGNALS))}")
                for signal in periods
                if signal not in EVICTION_SIGNALS
            ]
        )
        return periods

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        problems: list[tuple[Loc, str]] = []
        high, low = self.image_gc_high_threshold_percent, self.image_gc_low_threshold_percent
        if high is not None and low is not None and high <= low:
            problems.append(
                (
                    ("imageGCHighThresholdPercent",),
                    f"must be greater than imageGCLowThresholdPercent (got {high}, low is {low})",
                )
            )
        for signal in self.eviction_soft:
            if signal not in self.eviction_soft_grace_period:
                problems.append(
                    (
                        ("evictionSoftGracePeriod",),
                        f"needs a grace period for the evictionSoft signal {signal!r}",
                    )
                )
        for signal in self.eviction_soft_grace_period:
            if signal not in self.eviction_soft:
                problems.append(
                    (
                        ("evictionSoft",),
                        f"needs a threshold for the evictionSoftGracePeriod signal {signal!r}",
                    )
                )
        raise_problems(problems)
        return self


# --- block devices and metadata options ---------------------------------------------------------------


def _check_volume_size(size: str) -> str:
    match = _VOLUME_SIZE.fullmatch(size)
    if not match or not 1 <= int(match.group(1)) <= _VOLUME_SIZE_MAX[match.group(2)]:
        raise RuleError(
            f"must be a whole number of Gi, G, Ti or T, from 1 up to 59000Gi, 64000G, 58Ti or 64T "
            f"(got {show(size)})"
        )
    return size


class BlockDevice(SpecModel):
    delete_on_termination: Bool | None = None
    encrypted: Bool | None = None
    iops: Annotated[Int, at_least(0)] | None = None
    kms_key_id: str | None = Field(default=None, alias="kmsKeyID")
    snapshot_id: str | None = Field(default=None, alias="snapshotID")
    throughput: Annotated[Int, at_least(0)] | None = None
    volume_size: Annotated[str, AfterValidator(_check_volume_size)] | None = None
    volume_type: VolumeType | None = None

    @model_validator(mode="after")
    def _sized(self) -> Self:
        if self.snapshot_id is None and self.volume_size is None:
            raise RuleError("must set snapshotID or volumeSize")
        return self


class BlockDeviceMapping(SpecModel):
    device_name: str | None = None
    ebs: BlockDevice | None = None
    root_volume: Bool = Field(default=False, exclude_if=lambda v: not v)


class MetadataOptions(SpecModel):
    """Instance metadata service settings; Karpenter's defaults are IMDSv2 only, one hop."""

    http_endpoint: Literal["enabled", "disabled"] = "enabled"
    http_protocol_ipv6: Literal["enabled", "disabled"] = Field(default="disabled", alias="httpProtocolIPv6")
    http_put_response_hop_limit: Annotated[Int, between(1, 64)] = 1
    http_tokens: Literal["required", "optional"] = "required"


# --- tags ---------------------------------------------------------------------------------------------

_RESTRICTED_TAG_KEYS = frozenset(
    {labels.TAG_EKS_CLUSTER_NAME, labels.NODEPOOL, labels.NODECLAIM, labels.EC2NODECLASS}
)


def restricted_tag_problem(key: str) -> str | None:
    if not key:
        return "empty tag keys are not supported"
    if key.startswith("kubernetes.io/cluster"):
        return f"tag {key!r} is restricted; Karpenter sets kubernetes.io/cluster/<cluster> itself"
    if key in _RESTRICTED_TAG_KEYS:
        return f"tag {key!r} is restricted; Karpenter sets it on every instance"
    return None


# --- spec, status, kind -------------------------------------------------------------------------------


def _check_terms(terms: list[Any]) -> list[Any]:
    if not terms:
        raise RuleError("must not be empty")
    if len(terms) > MAX_SELECTOR_TERMS:
        raise RuleError(f"must have at most {MAX_SELECTOR_TERMS} terms (got {len(terms)})")
    return terms


def _check_optional_terms(terms: list[Any]) -> list[Any]:
    if len(terms) > MAX_SELECTOR_TERMS:
        raise RuleError(f"must have at most {MAX_SELECTOR_TERMS} terms (got {len(terms)})")
    return terms


def _check_ami_terms(terms: list[AMISelectorTerm]) -> list[AMISelectorTerm]:
    _check_terms(terms)
    if len(terms) > 1:
        for index, term in enumerate(terms):
            if term.alias is not None:
                raise RuleError(
                    "an 'alias' term must be the only amiSelectorTerms entry", at=(index, "alias")
                )
    return terms


def _check_not_empty(value: str) -> str:
    if not value:
        raise RuleError("must not be empty")
    return value


NonEmptyStr = Annotated[str, AfterValidator(_check_not_empty)]


class EC2NodeClassSpec(SpecModel):
    subnet_selector_terms: Annotated[list[SubnetSelectorTerm], AfterValidator(_check_terms)]
    security_group_selector_terms: Annotated[list[SecurityGroupSelectorTerm], AfterValidator(_check_terms)]
    capacity_reservation_selector_terms: Annotated[
        list[CapacityReservationSelectorTerm], AfterValidator(_check_optional_terms)
    ] = omitempty(list)
    associate_public_ip_address: Bool | None = Field(default=None, alias="associatePublicIPAddress")
    ami_selector_terms: Annotated[list[AMISelectorTerm], AfterValidator(_check_ami_terms)]
    ami_family: AMIFamily | None = None
    user_data: str | None = None
    role: NonEmptyStr | None = None
    instance_profile: NonEmptyStr | None = None
    tags: dict[str, str] = omitempty(dict)
    kubelet: KubeletConfiguration | None = None
    block_device_mappings: Annotated[
        list[BlockDeviceMapping], Field(max_length=MAX_BLOCK_DEVICE_MAPPINGS)
    ] = omitempty(list)
    instance_store_policy: Literal["RAID0"] | None = None
    detailed_monitoring: Bool | None = None
    metadata_options: MetadataOptions = Field(default_factory=MetadataOptions)
    context: str | None = None

    @field_validator("tags")
    @classmethod
    def _tags_allowed(cls, tags: dict[str, str]) -> dict[str, str]:
        problems: list[tuple[Loc, str]] = []
        for key in tags:
            problem = restricted_tag_problem(key)
            if problem:
                problems.append(((key,), problem))
        raise_problems(problems)
        return tags

    @field_validator("block_device_mappings")
    @classmethod
    def _one_root_volume(cls, mappings: list[BlockDeviceMapping]) -> list[BlockDeviceMapping]:
        roots = [index for index, mapping in enumerate(mappings) if mapping.root_volume]
        if len(roots) > 1:
            raise RuleError(
                f"only one block device mapping may be the root volume (indexes {roots})",
                at=(roots[1], "rootVolume"),
            )
        return mappings

    @model_validator(mode="after")
    def _identity_and_family(self) -> Self:
        if (self.role is None) == (self.instance_profile is None):
            state = "both are set" if self.role is not None else "neither is set"
            raise RuleError(f"must set exactly one of 'role' or 'instanceProfile' ({state})")
        alias = self.parsed_alias()
        if alias is None and self.ami_family is None:
            raise RuleError(
                "is required when amiSelectorTerms has no alias (set it, or select an AMI with an alias "
                "such as al2023@latest)",
                at=("amiFamily",),
            )
        if alias is not None and self.ami_family not in (None, alias.family, AMI_FAMILY_CUSTOM):
            raise RuleError(
                f"must be {alias.family!r} or 'Custom' with the alias "
                f"{alias.family.lower()}@{alias.version} (got {self.ami_family!r})",
                at=("amiFamily",),
            )
        return self

    def parsed_alias(self) -> AMIAlias | None:
        for term in self.ami_selector_terms:
            alias = term.parsed_alias()
            if alias is not None:
                return alias
        return None


class SubnetStatus(LenientModel):
    id: str
    zone: str
    zone_id: str | None = Field(default=None, alias="zoneID")


class SecurityGroupStatus(LenientModel):
    id: str
    name: str | None = None


class AMIStatus(LenientModel):
    id: str
    name: str | None = None
    requirements: list[NodeSelectorRequirement] = omitempty(list)
    deprecated: bool | None = None


class CapacityReservationStatus(LenientModel):
    id: str
    availability_zone: str | None = None
    instance_type: str | None = None
    instance_match_criteria: str | None = None
    owner_id: str | None = Field(default=None, alias="ownerID")
    reservation_type: str | None = None
    state: str | None = None
    end_time: str | None = None


class EC2NodeClassStatus(LenientModel):
    subnets: list[SubnetStatus] = omitempty(list)
    security_groups: list[SecurityGroupStatus] = omitempty(list)
    amis: list[AMIStatus] = omitempty(list)
    instance_profile: str | None = None
    capacity_reservations: list[CapacityReservationStatus] = omitempty(list)
    conditions: list[Condition] = omitempty(list)


class EC2NodeClass(ResourceModel):
    """A Karpenter v1 EC2NodeClass. ``EC2NodeClass.from_manifest(doc)`` raises a one-line ManifestError."""

    API_VERSION: ClassVar[str] = "karpenter.k8s.aws/v1"
    KIND: ClassVar[str] = "EC2NodeClass"

    api_version: Literal["karpenter.k8s.aws/v1"] = "karpenter.k8s.aws/v1"
    kind: Literal["EC2NodeClass"] = "EC2NodeClass"
    metadata: ObjectMeta
    spec: EC2NodeClassSpec
    status: EC2NodeClassStatus = omitempty(EC2NodeClassStatus)

    def ami_alias(self) -> AMIAlias | None:
        """The alias term, split into its AMI family and version, if the AMIs are selected by alias."""
        return self.spec.parsed_alias()

    def resolved_ami_family(self) -> str:
        """The AMI family that shapes user data and default block devices.

        ``spec.amiFamily`` when set (it may be 'Custom' with an alias), otherwise the alias's family.
        """
        alias = next((t.alias for t in self.spec.ami_selector_terms or () if t.alias), None)
        return ami_family_for(self.spec.ami_family, alias)

    def condition(self, condition_type: str) -> Condition | None:
        return find_condition(self.status.conditions, condition_type)

    def static_hash(self) -> str:
        """A stable hash of the settings baked into launched instances, for drift.

        Like Karpenter's ``karpenter.k8s.aws/ec2nodeclass-hash``: selector terms are left out (their results
        drift by comparison with the instance), and the AMI family counts as resolved, so setting
        ``amiFamily: AL2023`` next to ``al2023@latest`` changes nothing. List order does not matter.
        """
        spec = self.spec.model_dump(
            by_alias=True,
            exclude_none=True,
            mode="json",
            exclude={
                "subnet_selector_terms",
                "security_group_selector_terms",
                "capacity_reservation_selector_terms",
                "ami_selector_terms",
                "ami_family",
            },
        )
        spec["amiFamily"] = self.resolved_ami_family()
        return stable_hash(spec)
