"""Pieces shared by the Karpenter v1 kinds: base models, requirements, taints, durations, quantities.

Conventions:
- Python names are snake_case, manifest names camelCase (aliases); both are accepted on input.
- Spec models forbid unknown fields so that a typo is an error, not a silently ignored setting. Metadata
  and status accept anything, because the API server and controllers add fields we don't model.
- Optional collections default to empty and are left out of the dump when empty, as Go's ``omitempty``.
- Durations and quantities keep the user's text, so a manifest round-trips unchanged; accessors give the
  parsed value.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    Strict,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from serverless_karpenter.api.errors import Loc, ManifestError, RuleError, raise_problems, show

# --- base models --------------------------------------------------------------------------------------

_BASE_CONFIG = ConfigDict(
    alias_generator=to_camel,
    populate_by_name=True,
    # Building validators for every model at import would tax each Lambda cold start; build on first use.
    defer_build=True,
)


def _drop_nulls(data: Any) -> Any:
    # The API server prunes nulls from custom resources before defaulting, so `labels:` left empty by a
    # Helm template means "unset", never "invalid".
    if isinstance(data, dict) and None in data.values():
        return {key: value for key, value in data.items() if value is not None}
    return data


class SpecModel(BaseModel):
    """A user-authored part of a manifest: unknown fields are errors."""

    model_config = ConfigDict(**_BASE_CONFIG, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _nulls_are_unset(cls, data: Any) -> Any:
        return _drop_nulls(data)


class LenientModel(BaseModel):
    """Metadata and status: written by the API server and controllers, so unknown fields are kept."""

    model_config = ConfigDict(**_BASE_CONFIG, extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _nulls_are_unset(cls, data: Any) -> Any:
        return _drop_nulls(data)


def _is_empty(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, list | dict | str | tuple):
        return not value
    if isinstance(value, BaseModel):
        return not value.model_dump(exclude_none=True)
    return False


def omitempty(default_factory: Callable[[], Any], **kwargs: Any) -> Any:
    """A field that defaults to an empty value and is left out of the manifest while empty."""
    return Field(default_factory=default_factory, exclude_if=_is_empty, **kwargs)


# Kubernetes integers and booleans are typed: ``weight: "5"`` or ``weight: true`` is rejected by the API
# server, so it is rejected here too.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _within_int64(value: int) -> int:
    # The API server decodes integers into int64; a larger one is no integer to it, so none to us.
    if not INT64_MIN <= value <= INT64_MAX:
        raise RuleError(f"must be an integer that fits in 64 bits (got {value})")
    return value


# Whole numbers only (YAML's `1.0` or "1" are errors), as the API server's int64 fields.
Int = Annotated[int, Strict(), AfterValidator(_within_int64)]
Bool = Annotated[bool, Strict()]


def between(low: int, high: int) -> AfterValidator:
    def check(value: int) -> int:
        if not low <= value <= high:
            raise RuleError(f"must be between {low} and {high} (got {value})")
        return value

    return AfterValidator(check)


def at_least(low: int) -> AfterValidator:
    def check(value: int) -> int:
        if value < low:
            raise RuleError(f"must be at least {low} (got {value})")
        return value

    return AfterValidator(check)


def _to_rfc3339(value: Any) -> Any:
    if isinstance(value, datetime):
        from serverless_karpenter.clock import to_rfc3339

        return to_rfc3339(value)
    return value


# RFC 3339 text, kept as written; a datetime (as the kubernetes client returns) is formatted on the way in.
Timestamp = Annotated[str, BeforeValidator(_to_rfc3339)]


class ResourceModel(SpecModel):
    """Behaviour shared by the top-level kinds (NodePool, EC2NodeClass, NodeClaim, NodeOverlay)."""

    API_VERSION: ClassVar[str]
    KIND: ClassVar[str]
    # Whether validation refuses a manifest with no metadata.name: users write NodePools, EC2NodeClasses
    # and NodeOverlays by name, while a NodeClaim may carry only generateName until the API server names it.
    NAME_REQUIRED: ClassVar[bool] = True

    @field_validator("metadata", check_fields=False)
    @classmethod
    def _has_name(cls, metadata: Any) -> Any:
        if cls.NAME_REQUIRED and isinstance(metadata, ObjectMeta) and not metadata.name:
            raise RuleError("is required", at=("name",))
        return metadata

    @property
    def name(self) -> str:
        metadata = getattr(self, "metadata", None)
        return (metadata.name or "") if isinstance(metadata, ObjectMeta) else ""

    def to_manifest(self) -> dict[str, Any]:
        """The Kubernetes manifest: camelCase names, nothing unset."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")

    @classmethod
    def from_manifest(cls, doc: Mapping[str, Any]) -> Self:
        """Validate a manifest; raise :class:`ManifestError` (one line, names the field) when it is wrong."""
        try:
            return cls.model_validate(doc)
        except ValidationError as exc:
            raise ManifestError.from_validation_error(cls.KIND, manifest_name(doc), exc, cls) from exc


def manifest_name(doc: Any) -> str | None:
    if isinstance(doc, Mapping):
        metadata = doc.get("metadata")
        if isinstance(metadata, Mapping):
            name = metadata.get("name") or metadata.get("generateName")
            if isinstance(name, str) and name:
                return name
    return None


# --- names and label values ---------------------------------------------------------------------------

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def qualified_name_problem(key: str) -> str | None:
    """Why ``key`` is not a Kubernetes qualified name (``[prefix/]name``), or None when it is one."""
    if not key:
        return "must not be empty"
    prefix, _, name = key.rpartition("/")
    if "/" in key and not prefix:
        return f"the prefix before '/' must not be empty (got {key!r})"
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return (
            f"the prefix {prefix!r} must be a DNS subdomain: lowercase letters, digits, '-' and '.', "
            f"at most 253 characters (got {key!r})"
        )
    if not name:
        return f"the name after the prefix must not be empty (got {key!r})"
    if len(name) > 63:
        return f"the name part must be at most 63 characters (got {len(name)} in {key!r})"
    if not _NAME_PART.fullmatch(name):
        return (
            "must be a qualified name: letters, digits, '-', '_' and '.', starting and ending with a letter "
            f"or digit, with an optional DNS prefix and '/' (got {key!r})"
        )
    return None


def label_value_problem(value: str) -> str | None:
    """Why ``value`` is not a valid Kubernetes label value, or None when it is one."""
    if len(value) > 63:
        return f"must be at most 63 characters (got {len(value)} in {value!r})"
    if not _LABEL_VALUE.fullmatch(value):
        return (
            "must be empty or letters, digits, '-', '_' and '.', starting and ending with a letter or digit "
            f"(got {value!r})"
        )
    return None


def dns_subdomain_problem(name: str) -> str | None:
    if len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        return (
            "must be a DNS subdomain: lowercase letters, digits, '-' and '.', starting and ending with a "
            f"letter or digit, at most 253 characters (got {name!r})"
        )
    return None


def _check_qualified_name(key: str) -> str:
    problem = qualified_name_problem(key)
    if problem:
        raise RuleError(problem)
    return key


QualifiedName = Annotated[str, AfterValidator(_check_qualified_name)]


# --- metadata and conditions --------------------------------------------------------------------------


class ObjectMeta(LenientModel):
    """Kubernetes object metadata; fields we don't model (managedFields, ...) are kept as they are."""

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] = omitempty(dict)
    annotations: dict[str, str] = omitempty(dict)
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: Timestamp | None = None
    deletion_timestamp: Timestamp | None = None
    deletion_grace_period_seconds: int | None = None
    finalizers: list[str] = omitempty(list)
    owner_references: list[dict[str, Any]] = omitempty(list)

    @field_validator("name")
    @classmethod
    def _name_is_dns_subdomain(cls, name: str | None) -> str | None:
        if name is not None:
            problem = dns_subdomain_problem(name)
            if problem:
                raise RuleError(problem)
        return name


class Condition(LenientModel):
    """A status condition (``type``, ``status`` True/False/Unknown, ``reason``, ``message``, ...)."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None
    last_transition_time: Timestamp | None = None
    observed_generation: int | None = None


def find_condition(conditions: Sequence[Condition], condition_type: str) -> Condition | None:
    for condition in conditions:
        if condition.type == condition_type:
            return condition
    return None


# --- durations ----------------------------------------------------------------------------------------

NEVER = "Never"

_GO_DURATION = re.compile(r"^([0-9]*\.?[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
_GO_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
# Karpenter's CRD patterns: integer amounts of s, m and h; "Never" where the field allows it.
_KARPENTER_DURATION = re.compile(r"^([0-9]+(s|m|h))+$")
_BUDGET_DURATION = re.compile(r"^(([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?$")


def parse_duration(text: str) -> timedelta | None:
    """Parse a Go duration (``720h``, ``1h30m``, ``10m``, ``30s``, ``1.5h``, ``300ms``); ``Never`` is None.

    Raises ValueError for anything else.
    """
    if text == NEVER:
        return None
    if text == "0":
        return timedelta(0)
    rest = text
    total = 0.0
    if not rest:
        raise ValueError("a duration must not be empty")
    while rest:
        match = _GO_DURATION.match(rest)
        if not match:
            raise ValueError(f"invalid duration {text!r}: expected a number and a unit (h, m, s, ms, us, ns)")
        total += float(match.group(1)) * _GO_UNIT_SECONDS[match.group(2)]
        rest = rest[match.end() :]
    return timedelta(seconds=total)


def format_duration(value: timedelta | None) -> str:
    """The Go rendering of a duration (``720h0m0s``, ``1m30s``, ``0s``); None is ``Never``."""
    if value is None:
        return NEVER
    micros = round(value.total_seconds() * 1_000_000)
    sign = "-" if micros < 0 else ""
    micros = abs(micros)
    if micros == 0:
        return "0s"
    if micros < 1_000_000:
        if micros % 1000 == 0:
            return f"{sign}{micros // 1000}ms"
        return f"{sign}{micros}µs"
    hours, rem = divmod(micros, 3_600_000_000)
    minutes, rem = divmod(rem, 60_000_000)
    seconds, frac = divmod(rem, 1_000_000)
    sec_text = f"{seconds}.{frac:06d}".rstrip("0") if frac else str(seconds)
    if hours:
        return f"{sign}{hours}h{minutes}m{sec_text}s"
    if minutes:
        return f"{sign}{minutes}m{sec_text}s"
    return f"{sign}{sec_text}s"


def _check_nillable_duration(text: str) -> str:
    if text != NEVER and not _KARPENTER_DURATION.fullmatch(text):
        raise RuleError(
            f"must be a duration of whole hours, minutes and seconds such as 720h, 1h30m or 30s, "
            f"or Never (got {show(text)})"
        )
    return text


def _check_duration(text: str) -> str:
    if not _KARPENTER_DURATION.fullmatch(text):
        raise RuleError(
            "must be a duration of whole hours, minutes and seconds such as 48h, 1h30m or 30s "
            f"(got {show(text)})"
        )
    return text


def _check_budget_duration(text: str) -> str:
    if not _BUDGET_DURATION.fullmatch(text):
        raise RuleError(
            f"must be a duration in hours and minutes only, such as 8h, 30m or 1h30m (got {show(text)})"
        )
    return text


def _check_go_duration(text: str) -> str:
    try:
        value = parse_duration(text)
    except ValueError:
        value = None
        ok = False
    else:
        ok = value is not None
    if not ok:
        raise RuleError(f"must be a duration such as 1m30s or 2m (got {show(text)})")
    return text


# ``Never`` or a duration: ``expireAfter``, ``consolidateAfter``.
NillableDuration = Annotated[str, AfterValidator(_check_nillable_duration)]
# A duration that cannot be ``Never``: ``terminationGracePeriod``.
Duration = Annotated[str, AfterValidator(_check_duration)]
# A budget's active window: hours and minutes only, because cron has no seconds.
BudgetDuration = Annotated[str, AfterValidator(_check_budget_duration)]
# Any Go duration (``metav1.Duration``), as in the kubelet's eviction grace periods.
GoDuration = Annotated[str, AfterValidator(_check_go_duration)]


# --- quantities ---------------------------------------------------------------------------------------


def quantity_problem(value: Any) -> str | None:
    """Why ``value`` is not a Kubernetes quantity (``100m``, ``4Gi``, ``10``), or None when it is one."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return f"must be a quantity such as 100m, 4Gi or 10 (got {show(value)})"
    # The one quantity parser lives behind scheduling.resources; importing it is deferred because it loads
    # the kubernetes client, which only manifests with quantities need.
    from serverless_karpenter.scheduling import resources

    try:
        resources.parse("", value)
    except (ValueError, ArithmeticError):
        return f"must be a quantity such as 100m, 4Gi or 10 (got {show(value)})"
    return None


def _check_quantity(value: Any) -> str | int | float:
    problem = quantity_problem(value)
    if problem:
        raise RuleError(problem)
    return value


# A quantity as the user wrote it (``"4Gi"``, ``1000``); parse with ``scheduling.resources.parse``.
Quantity = Annotated[str | int | float, PlainValidator(_check_quantity)]


def parse_quantities(quantities: Mapping[str, str | int | float]) -> dict[str, int]:
    """Canonical integers (cpu millicores, bytes, counts) for a validated quantity map."""
    from serverless_karpenter.scheduling import resources

    return resources.parse_list(quantities)


# --- taints -------------------------------------------------------------------------------------------

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Taint(SpecModel):
    key: QualifiedName
    value: str | None = None
    effect: TaintEffect
    time_added: Timestamp | None = None

    @field_validator("value")
    @classmethod
    def _value_shape(cls, value: str | None) -> str | None:
        # Karpenter's CRD gives taint values the qualified-name pattern, stricter than a label value.
        if value:
            problem = qualified_name_problem(value)
            if problem:
                raise RuleError(problem.replace("qualified name", "taint value"))
        return value


def duplicate_taint_problems(groups: Sequence[tuple[str, Sequence[Taint]]]) -> list[tuple[Loc, str]]:
    """A key/effect pair may appear once across taints and startupTaints (Karpenter's runtime check)."""
    seen: dict[tuple[str, str], str] = {}
    problems: list[tuple[Loc, str]] = []
    for field_name, taints in groups:
        for index, taint in enumerate(taints):
            pair = (taint.key, taint.effect)
            where = f"{field_name}[{index}]"
            if pair in seen:
                problems.append(
                    (
                        (field_name, index),
                        f"duplicate taint {taint.key}:{taint.effect} (also at {seen[pair]})",
                    )
                )
            else:
                seen[pair] = where
    return problems


# --- node class reference -----------------------------------------------------------------------------


class NodeClassReference(SpecModel):
    group: str
    kind: str
    name: str

    @field_validator("group")
    @classmethod
    def _group_has_no_version(cls, group: str) -> str:
        if "/" in group:
            raise RuleError(
                f"must be an API group without a version, such as karpenter.k8s.aws (got {show(group)})"
            )
        return group

    @field_validator("group", "kind", "name")
    @classmethod
    def _not_empty(cls, value: str) -> str:
        if not value:
            raise RuleError("must not be empty")
        return value


# --- requirements -------------------------------------------------------------------------------------

Operator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
MAX_REQUIREMENTS = 100


class NodeSelectorRequirement(SpecModel):
    """``key``, ``operator`` and ``values``, with the operator's rules on the values."""

    key: QualifiedName
    operator: Operator
    values: list[str] = omitempty(list)

    @field_validator("key")
    @classmethod
    def _key_length(cls, key: str) -> str:
        if len(key) > 316:
            raise RuleError(f"must be at most 316 characters (got {len(key)})")
        return key

    @field_validator("values")
    @classmethod
    def _values_are_label_values(cls, values: list[str]) -> list[str]:
        problems: list[tuple[Loc, str]] = []
        for index, value in enumerate(values):
            problem = label_value_problem(value)
            if problem:
                problems.append(((index,), problem))
        raise_problems(problems)
        return values

    @model_validator(mode="after")
    def _operator_rules(self) -> Self:
        raise_problems(self.operator_problems())
        return self

    def operator_problems(self) -> list[tuple[Loc, str]]:
        op, values = self.operator, self.values
        if op == "In" and not values:
            return [(("values",), "operator In needs at least one value")]
        if op in ("Gt", "Lt") and (len(values) != 1 or not values[0].isdigit()):
            return [
                (("values",), f"operator {op} needs exactly one non-negative integer value (got {values})")
            ]
        if op in ("Exists", "DoesNotExist") and values:
            return [(("values",), f"operator {op} takes no values (got {values})")]
        return []


class NodeSelectorRequirementWithMinValues(NodeSelectorRequirement):
    """A requirement that also asks for flexibility: at least ``minValues`` distinct values (1..50)."""

    min_values: Annotated[Int, between(1, 50)] | None = None

    @model_validator(mode="after")
    def _min_values_fit(self) -> Self:
        if self.operator == "In" and self.min_values is not None and len(self.values) < self.min_values:
            raise RuleError(
                "must not exceed the number of values for operator In "
                f"(minValues {self.min_values}, values {len(self.values)})",
                at=("minValues",),
            )
        return self


def requirement_key_problems(
    requirements: Sequence[NodeSelectorRequirement],
    restriction: Callable[[str], str | None],
) -> list[tuple[Loc, str]]:
    """Apply a kind's label restriction to every requirement key, pointing at ``[i].key``."""
    problems: list[tuple[Loc, str]] = []
    for index, requirement in enumerate(requirements):
        problem = restriction(requirement.key)
        if problem:
            problems.append(((index, "key"), problem))
    return problems


def check_requirement_count(requirements: list[Any]) -> list[Any]:
    if len(requirements) > MAX_REQUIREMENTS:
        raise RuleError(f"must have at most {MAX_REQUIREMENTS} requirements (got {len(requirements)})")
    return requirements


# --- quantity maps ------------------------------------------------------------------------------------


def quantity_map_problems(
    quantities: Mapping[str, Any],
    *,
    allowed_names: frozenset[str] | None = None,
    non_negative: bool = False,
) -> list[tuple[Loc, str]]:
    problems: list[tuple[Loc, str]] = []
    for name, value in quantities.items():
        if allowed_names is not None and name not in allowed_names:
            problems.append(((name,), f"is not allowed here; use one of: {', '.join(sorted(allowed_names))}"))
        if non_negative and (str(value).startswith("-") or (isinstance(value, int | float) and value < 0)):
            problems.append(((name,), f"must not be negative (got {show(value)})"))
    return problems


# --- hashing for drift --------------------------------------------------------------------------------


def _canonical(value: Any) -> Any:
    """Drop unset and empty values and treat lists as sets, as Karpenter's hash options do."""
    if isinstance(value, Mapping):
        out = {}
        for key in sorted(value):
            item = _canonical(value[key])
            if not _is_empty(item):
                out[key] = item
        return out
    if isinstance(value, list | tuple):
        items = [_canonical(v) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True, separators=(",", ":")))
    return value


def stable_hash(value: Any) -> str:
    """A decimal hash, stable across processes and Python versions, of JSON-like data."""
    text = json.dumps(_canonical(value), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    digest = hashlib.sha256(text.encode()).digest()
    return str(int.from_bytes(digest[:8], "big"))
