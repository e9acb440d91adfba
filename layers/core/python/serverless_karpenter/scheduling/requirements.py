"""The requirements algebra: Karpenter's ``pkg/scheduling/requirement(s).go`` semantics.

A ``Requirement`` is a set of label values for one key, held as a finite ``frozenset`` plus a complement
flag, with optional integer bounds:

- ``In [a b]``      -> values {a, b}
- ``NotIn [a]``     -> the complement of {a}
- ``Exists``        -> the complement of the empty set
- ``DoesNotExist``  -> the empty set
- ``Gt n`` / ``Lt n`` -> ``Exists`` with an exclusive integer bound; a value that is not a base-10 integer
  (Go's ``strconv.Atoi`` syntax) never satisfies a bound.

``Requirements`` maps keys to requirements; adding a requirement on a key already present intersects them.

Both types are immutable. The solver evaluates them millions of times, so they are plain ``__slots__``
classes with precomputed fields; ``Requirements.compatible`` and ``Requirement.has_intersection``
allocate nothing on the success path, and reasons (strings) are only built when a check fails.

Where we knowingly differ from Karpenter (all documented at the method):
- ``Requirement.any()`` is deterministic (the smallest value) where Karpenter picks at random.
- ``Gte`` / ``Lte`` (only in the newest Karpenter) are accepted and folded into exclusive bounds.
- Empty integer ranges are detected exactly (``Gt 4`` with ``Lt 5`` is empty), as the newest Karpenter does.
- ``check_min_values`` counts only values the requirement itself allows.
"""

from __future__ import annotations

import functools
import re
from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, Sequence, ValuesView
from typing import Any

from serverless_karpenter.api import labels as wk

IN = "In"
NOT_IN = "NotIn"
EXISTS = "Exists"
DOES_NOT_EXIST = "DoesNotExist"
GT = "Gt"
LT = "Lt"
GTE = "Gte"
LTE = "Lte"
OPERATORS = frozenset({IN, NOT_IN, EXISTS, DOES_NOT_EXIST, GT, LT, GTE, LTE})

# Karpenter's Len() of a complement set is math.MaxInt64 minus the excluded values.
UNBOUNDED_LEN = (1 << 63) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1

# Deprecated beta keys, rewritten to their stable names on construction (Karpenter's NormalizedLabels).
NORMALIZED_LABELS: Mapping[str, str] = {
    "failure-domain.beta.kubernetes.io/zone": wk.ZONE,
    "failure-domain.beta.kubernetes.io/region": wk.REGION,
    "beta.kubernetes.io/arch": wk.ARCH,
    "beta.kubernetes.io/os": wk.OS,
    "beta.kubernetes.io/instance-type": wk.INSTANCE_TYPE,
    # karpenter-provider-aws adds the EBS CSI driver's topology key (its operator does, at start).
    "topology.ebs.csi.aws.com/zone": wk.ZONE,
}

# Karpenter lets an incoming requirement with one of these operators pass when the key is undefined, or
# when both sides reduce to one of them and their intersection is empty.
_ABSENCE_OPERATORS = frozenset({NOT_IN, DOES_NOT_EXIST})

_EMPTY: frozenset[str] = frozenset()
_INTEGER = re.compile(r"[+-]?[0-9]+")
_MAX_LISTED_VALUES = 5


@functools.lru_cache(maxsize=16384)
def parse_int(value: str) -> int | None:
    """``value`` as an integer with Go ``strconv.Atoi`` syntax (int64 range), or None."""
    if _INTEGER.fullmatch(value) is None:
        return None
    number = int(value)
    if number < _INT64_MIN or number > _INT64_MAX:
        return None
    return number


def _within(value: str, greater_than: int | None, less_than: int | None) -> bool:
    number = parse_int(value)
    if number is None:
        return False
    if greater_than is not None and number <= greater_than:
        return False
    return less_than is None or number < less_than


def _bounds_empty(greater_than: int | None, less_than: int | None) -> bool:
    # No integer lies strictly between the bounds.
    return greater_than is not None and less_than is not None and greater_than + 1 >= less_than


class Requirement:
    """One key's allowed values. Immutable: never assign to its attributes.

    ``Requirement(key, operator, values=(), min_values=None)`` builds one from a node selector
    requirement. Deprecated beta keys are normalized. ``Gt``/``Lt``/``Gte``/``Lte`` need exactly one
    integer value; a ``ValueError`` names the problem otherwise.
    """

    __slots__ = (
        "_absent_ok",
        "_hash",
        "_operator",
        "_values",
        "complement",
        "greater_than",
        "key",
        "less_than",
        "min_values",
    )

    key: str
    complement: bool
    greater_than: int | None
    less_than: int | None
    min_values: int | None
    _values: frozenset[str]
    _operator: str
    _absent_ok: bool
    _hash: int | None

    def __init__(
        self,
        key: str,
        operator: str,
        values: Iterable[str] | None = None,
        min_values: int | None = None,
    ) -> None:
        if isinstance(values, str):
            raise TypeError(f"requirement {key!r}: values must be a list of strings, not a string")
        key = NORMALIZED_LABELS.get(key, key)
        greater_than: int | None = None
        less_than: int | None = None
        if operator == IN:
            complement, value_set = False, frozenset(values or ())
        elif operator == NOT_IN:
            complement, value_set = True, frozenset(values or ())
        elif operator == EXISTS:
            complement, value_set = True, _EMPTY
        elif operator == DOES_NOT_EXIST:
            complement, value_set = False, _EMPTY
        elif operator in (GT, LT, GTE, LTE):
            bound = _single_integer(key, operator, values)
            complement, value_set = True, _EMPTY
            if operator == GT:
                greater_than = bound
            elif operator == GTE:
                greater_than = bound - 1
            elif operator == LT:
                less_than = bound
            else:
                less_than = bound + 1
        else:
            raise ValueError(f"requirement {key!r}: unknown operator {operator!r}")
        self.key = key
        self.complement = complement
        self._values = value_set
        self.greater_than = greater_than
        self.less_than = less_than
        self.min_values = min_values
        self._derive()

    @classmethod
    def _make(
        cls,
        key: str,
        complement: bool,
        values: frozenset[str],
        greater_than: int | None,
        less_than: int | None,
        *,
        min_values: int | None,
    ) -> Requirement:
        requirement = object.__new__(cls)
        requirement.key = key
        requirement.complement = complement
        requirement._values = values
        requirement.greater_than = greater_than
        requirement.less_than = less_than
        requirement.min_values = min_values
        requirement._derive()
        return requirement

    def _derive(self) -> None:
        complement, values = self.complement, self._values
        if complement:
            self._operator = NOT_IN if values else EXISTS
        else:
            self._operator = IN if values else DOES_NOT_EXIST
        # Kubernetes semantics for a node without the label: only DoesNotExist and a plain NotIn match.
        bounded = self.greater_than is not None or self.less_than is not None
        self._absent_ok = (not complement and not values) or (complement and bool(values) and not bounded)
        self._hash = None

    @staticmethod
    def exists(key: str) -> Requirement:
        """``key Exists``: shared per key, since requirements are immutable."""
        return _exists(key)

    @classmethod
    def from_node_selector_requirement(cls, item: Any) -> Requirement:
        """From a dict (``key``/``operator``/``values``/``minValues``) or an object with those attributes."""
        return cls(
            field_of(item, "key"),
            field_of(item, "operator"),
            field_of(item, "values") or (),
            field_of(item, "minValues", "min_values"),
        )

    # -- queries -----------------------------------------------------------------------------------

    def operator(self) -> str:
        """The operator this reduces to: In, NotIn, Exists or DoesNotExist (bounds read as Exists)."""
        return self._operator

    def values(self) -> frozenset[str]:
        """The finite set: allowed values for In, excluded values for NotIn, empty otherwise."""
        return self._values

    def len(self) -> int:
        """Karpenter's Len(): the number of values, ``UNBOUNDED_LEN - excluded`` for a complement."""
        if self.complement:
            return UNBOUNDED_LEN - len(self._values)
        return len(self._values)

    def has_bounds(self) -> bool:
        return self.greater_than is not None or self.less_than is not None

    def has(self, value: str) -> bool:
        """Whether ``value`` is allowed."""
        if (self.greater_than is not None or self.less_than is not None) and not _within(
            value, self.greater_than, self.less_than
        ):
            return False
        if self.complement:
            return value not in self._values
        return value in self._values

    def allows_absent(self) -> bool:
        """Whether a node without this label satisfies it (DoesNotExist, or NotIn without bounds)."""
        return self._absent_ok

    def any(self) -> str | None:
        """A value that satisfies this requirement, or None when there is none.

        Deterministic, unlike Karpenter's random pick: the smallest value of an In set; for a complement,
        the integer nearest zero inside the bounds that is not excluded.
        """
        if not self.complement:
            return min(self._values) if self._values else None
        greater_than, less_than = self.greater_than, self.less_than
        if _bounds_empty(greater_than, less_than):
            return None
        if greater_than is not None:
            candidate, step = greater_than + 1, 1
        elif less_than is not None and less_than <= 0:
            candidate, step = less_than - 1, -1
        else:
            candidate, step = 0, 1
        # Each excluded value can push the candidate by one, so this ends after len(values) + 1 steps.
        for _ in range(len(self._values) + 1):
            if (greater_than is not None and candidate <= greater_than) or (
                less_than is not None and candidate >= less_than
            ):
                return None
            text = str(candidate)
            if text not in self._values:
                return text
            candidate += step
        return None

    # -- algebra -----------------------------------------------------------------------------------

    def intersection(self, other: Requirement) -> Requirement:
        """The values allowed by both (Karpenter's Intersection). Keeps ``self.key``; keys are not checked.

        ``min_values`` becomes the larger of the two. Bounds that leave no integer give DoesNotExist.
        A finite result drops its bounds after filtering its values by them.
        """
        greater_than = self.greater_than
        if other.greater_than is not None and (greater_than is None or other.greater_than > greater_than):
            greater_than = other.greater_than
        less_than = self.less_than
        if other.less_than is not None and (less_than is None or other.less_than < less_than):
            less_than = other.less_than
        min_values = self.min_values
        if other.min_values is not None and (min_values is None or other.min_values > min_values):
            min_values = other.min_values
        if _bounds_empty(greater_than, less_than):
            return Requirement._make(self.key, False, _EMPTY, None, None, min_values=min_values)

        if self.complement:
            complement = other.complement
            values = self._values | other._values if complement else other._values - self._values
        else:
            complement = False
            values = self._values - other._values if other.complement else self._values & other._values
        if values and (greater_than is not None or less_than is not None):
            values = frozenset(v for v in values if _within(v, greater_than, less_than))
        if not complement:
            greater_than = less_than = None
        return Requirement._make(self.key, complement, values, greater_than, less_than, min_values=min_values)

    def has_intersection(self, other: Requirement) -> bool:
        """``self.intersection(other).len() > 0`` without building the intersection.

        As in Karpenter, two complements with compatible bounds always intersect, even when every
        integer inside the bounds happens to be excluded.
        """
        greater_than = self.greater_than
        if other.greater_than is not None and (greater_than is None or other.greater_than > greater_than):
            greater_than = other.greater_than
        less_than = self.less_than
        if other.less_than is not None and (less_than is None or other.less_than < less_than):
            less_than = other.less_than
        if _bounds_empty(greater_than, less_than):
            return False
        if self.complement:
            if other.complement:
                return True
            excluded, candidates = self._values, other._values
        elif other.complement:
            excluded, candidates = other._values, self._values
        else:
            # Finite sets never carry bounds, so this is plain set overlap.
            return not self._values.isdisjoint(other._values)
        if greater_than is None and less_than is None:
            return not candidates.issubset(excluded)
        return any(v not in excluded and _within(v, greater_than, less_than) for v in candidates)

    # -- rendering ---------------------------------------------------------------------------------

    def describe(self) -> str:
        """The requirement without its key, e.g. ``In [a b]``, ``Gt 4``, ``NotIn [x] minValues 2``."""
        operator = self._operator
        bounded = self.greater_than is not None or self.less_than is not None
        parts: list[str] = []
        if operator in (IN, NOT_IN):
            listed = sorted(self._values)
            if len(listed) > _MAX_LISTED_VALUES:
                listed = [*listed[:_MAX_LISTED_VALUES], f"and {len(listed) - _MAX_LISTED_VALUES} others"]
            parts.append(f"{operator} [{' '.join(listed)}]")
        elif not (operator == EXISTS and bounded):
            parts.append(operator)
        if self.greater_than is not None:
            parts.append(f"Gt {self.greater_than}")
        if self.less_than is not None:
            parts.append(f"Lt {self.less_than}")
        if self.min_values is not None:
            parts.append(f"minValues {self.min_values}")
        return " ".join(parts)

    def __str__(self) -> str:
        return f"{self.key} {self.describe()}"

    def __repr__(self) -> str:
        return f"Requirement({self})"

    def to_node_selector_requirements(self) -> list[dict[str, Any]]:
        """Kubernetes dicts that mean the same; a bounded NotIn or a two-sided range needs several."""
        extra: dict[str, Any] = {} if self.min_values is None else {"minValues": self.min_values}
        out: list[dict[str, Any]] = []
        if self.complement and self._values:
            out.append({"key": self.key, "operator": NOT_IN, "values": sorted(self._values), **extra})
        if self.greater_than is not None:
            out.append({"key": self.key, "operator": GT, "values": [str(self.greater_than)], **extra})
        if self.less_than is not None:
            out.append({"key": self.key, "operator": LT, "values": [str(self.less_than)], **extra})
        if not out:
            item: dict[str, Any] = {"key": self.key, "operator": self._operator}
            if self._operator == IN:
                item["values"] = sorted(self._values)
            out.append({**item, **extra})
        return out

    # -- identity ----------------------------------------------------------------------------------

    def _identity(self) -> tuple[str, bool, frozenset[str], int | None, int | None, int | None]:
        return (self.key, self.complement, self._values, self.greater_than, self.less_than, self.min_values)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Requirement):
            return NotImplemented
        return self._identity() == other._identity()

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self._identity())
        return self._hash


@functools.lru_cache(maxsize=4096)
def _exists(key: str) -> Requirement:
    # Requirements.get() answers every undefined key with this; caching keeps that lookup allocation-free.
    return Requirement._make(NORMALIZED_LABELS.get(key, key), True, _EMPTY, None, None, min_values=None)


def _single_integer(key: str, operator: str, values: Iterable[str] | None) -> int:
    listed = list(values or ())
    if len(listed) != 1:
        raise ValueError(f"requirement {key!r}: operator {operator} needs exactly one value, got {listed}")
    number = parse_int(str(listed[0]))
    if number is None:
        raise ValueError(f"requirement {key!r}: operator {operator} needs an integer, got {listed[0]!r}")
    return number


def field_of(obj: Any, camel: str, snake: str | None = None) -> Any:
    """A field of a Kubernetes dict (camelCase) or of an object (snake_case attributes, as the client)."""
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        value = obj.get(camel)
        if value is None and snake is not None:
            value = obj.get(snake)
        return value
    value = getattr(obj, snake or camel, None)
    if value is None and snake is not None:
        value = getattr(obj, camel, None)
    return value


def _pod_spec(pod: Any) -> Any:
    """Accept a pod or a pod spec: a pod spec never has a ``spec`` field."""
    spec = field_of(pod, "spec")
    return pod if spec is None else spec


def _node_affinity(pod: Any) -> Any:
    return field_of(field_of(_pod_spec(pod), "affinity"), "nodeAffinity", "node_affinity")


@functools.lru_cache(maxsize=4096)
def is_restricted_node_label(key: str) -> bool:
    """Whether Karpenter refuses to put ``key`` on a node itself (its ``IsRestrictedNodeLabel``).

    Well-known labels are restricted here because the provider sets them per instance type and offering.
    Domain matching is a plain suffix match, as Karpenter does it.
    """
    if key in wk.WELL_KNOWN_LABELS:
        return True
    domain = wk.label_domain(key)
    if any(domain.endswith(allowed) for allowed in wk.ALLOWED_LABEL_DOMAINS):
        return False
    if any(domain.endswith(restricted) for restricted in wk.RESTRICTED_LABEL_DOMAINS):
        return True
    return key in wk.RESTRICTED_LABELS


class Requirements:
    """An immutable mapping of label key to ``Requirement``; requirements on one key are intersected.

    It reads like a ``Mapping[str, Requirement]`` (``[]``, ``in``, iteration, ``len``, ``keys``,
    ``values``, ``items``) except that ``get(key)`` returns an unconstrained ``Exists`` requirement for
    an undefined key, as Karpenter's ``Get`` does. Instances are hashable and safe to share.

    ``add`` and ``merged`` return new objects; each copies the key map once, which is the fast path for
    Karpenter's "copy, then add the pod's requirements" step (``nodeclaim.merged(pod)``).
    """

    __slots__ = ("_by_key", "_hash")

    _by_key: dict[str, Requirement]
    _hash: int | None

    def __init__(self, requirements: Iterable[Requirement] = ()) -> None:
        by_key: dict[str, Requirement] = {}
        _add_into(by_key, requirements)
        self._by_key = by_key
        self._hash = None

    @classmethod
    def _wrap(cls, by_key: dict[str, Requirement]) -> Requirements:
        # Takes ownership of by_key; callers must not keep a reference to it.
        requirements = object.__new__(cls)
        requirements._by_key = by_key
        requirements._hash = None
        return requirements

    # -- constructors ------------------------------------------------------------------------------

    @classmethod
    def from_node_selector_requirements(cls, items: Iterable[Any] | None) -> Requirements:
        """From dicts or objects with ``key``/``operator``/``values``/``minValues`` (NodePool, NodeClaim)."""
        return cls(Requirement.from_node_selector_requirement(item) for item in items or ())

    @classmethod
    def from_labels(cls, labels: Mapping[str, str] | None) -> Requirements:
        """Each label becomes ``key In [value]``."""
        return cls(Requirement(key, IN, (value,)) for key, value in (labels or {}).items())

    @classmethod
    def from_node_selector(cls, node_selector: Mapping[str, str] | None) -> Requirements:
        """A pod's ``nodeSelector``: each entry is ``key In [value]``."""
        return cls.from_labels(node_selector)

    @classmethod
    def from_pod(cls, pod: Any, *, include_preferred: bool = False, required_term: int = 0) -> Requirements:
        """A pod's node constraints: ``nodeSelector`` plus one required node affinity term.

        ``pod`` is a pod or pod spec, as a Kubernetes dict or a kubernetes-client object. Required terms
        are ORed by Kubernetes; this takes term ``required_term`` (the first by default) and callers try
        the others by iterating, as Karpenter's relaxation does. With ``include_preferred``, the heaviest
        preferred term (the first among equals) is added as if required, like ``NewPodRequirements``;
        without it, this is ``NewStrictPodRequirements``. ``matchFields`` are ignored, as in Karpenter.
        """
        spec = _pod_spec(pod)
        by_key: dict[str, Requirement] = {}
        node_selector = field_of(spec, "nodeSelector", "node_selector") or {}
        _add_into(by_key, (Requirement(key, IN, (value,)) for key, value in node_selector.items()))
        node_affinity = field_of(field_of(spec, "affinity"), "nodeAffinity", "node_affinity")
        if node_affinity is None:
            return cls._wrap(by_key)
        if include_preferred:
            preferred = _preferred_terms(node_affinity)
            if preferred:
                heaviest = max(preferred, key=lambda term: field_of(term, "weight") or 0)
                _add_into(by_key, _term_requirements(field_of(heaviest, "preference")))
        terms = _required_terms(node_affinity)
        if 0 <= required_term < len(terms):
            _add_into(by_key, _term_requirements(terms[required_term]))
        return cls._wrap(by_key)

    # -- mapping protocol --------------------------------------------------------------------------

    def __getitem__(self, key: str) -> Requirement:
        return self._by_key[key]

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_key)

    def __len__(self) -> int:
        return len(self._by_key)

    def keys(self) -> KeysView[str]:
        return self._by_key.keys()

    def values(self) -> ValuesView[Requirement]:
        return self._by_key.values()

    def items(self) -> ItemsView[str, Requirement]:
        return self._by_key.items()

    def has(self, key: str) -> bool:
        return key in self._by_key

    def get(self, key: str) -> Requirement:
        """The requirement on ``key``; an undefined key allows any value (``Exists``)."""
        requirement = self._by_key.get(key)
        return requirement if requirement is not None else Requirement.exists(key)

    # -- combination -------------------------------------------------------------------------------

    def add(self, *requirements: Requirement) -> Requirements:
        """A new ``Requirements`` with ``requirements`` intersected in; ``self`` is unchanged."""
        by_key = dict(self._by_key)
        _add_into(by_key, requirements)
        return Requirements._wrap(by_key)

    def merged(self, other: Requirements) -> Requirements:
        """A new ``Requirements`` allowing only what both allow, key by key; ``self`` is unchanged."""
        if not other._by_key:
            return self
        if not self._by_key:
            return other
        by_key = dict(self._by_key)
        _add_into(by_key, other._by_key.values())
        return Requirements._wrap(by_key)

    def without(self, *keys: str) -> Requirements:
        """A new ``Requirements`` without the given keys."""
        return Requirements._wrap({k: r for k, r in self._by_key.items() if k not in keys})

    # -- compatibility -----------------------------------------------------------------------------

    def is_compatible(
        self, other: Requirements, allow_undefined: frozenset[str] | set[str] = wk.WELL_KNOWN_LABELS
    ) -> bool:
        """``compatible(...) is None``, without building a reason."""
        mine = self._by_key
        for key, incoming in other._by_key.items():
            existing = mine.get(key)
            if existing is None:
                if key in allow_undefined or incoming._operator in _ABSENCE_OPERATORS:
                    continue
                return False
            if not _keys_intersect(existing, incoming):
                return False
        return True

    def compatible(
        self, other: Requirements, allow_undefined: frozenset[str] | set[str] = wk.WELL_KNOWN_LABELS
    ) -> str | None:
        """None when ``other`` (incoming, e.g. a pod's) can be met by ``self`` (e.g. a NodePool's).

        Karpenter's ``Compatible``: a key of ``other`` that ``self`` lacks is an error unless it is in
        ``allow_undefined`` (well-known labels by default; pass ``frozenset()`` for none) or ``other``
        requires it ``NotIn``/``DoesNotExist``. That error is reported alone, for the first such key.
        Otherwise the reasons from ``intersects`` are returned.
        """
        if self.is_compatible(other, allow_undefined):
            return None
        mine = self._by_key
        for key, incoming in other._by_key.items():
            if key in mine or key in allow_undefined or incoming._operator in _ABSENCE_OPERATORS:
                continue
            return f'label "{key}" does not have known values{self._label_hint(key, allow_undefined)}'
        return self.intersects(other)

    def intersects(self, other: Requirements) -> str | None:
        """None when every key both define has a common value (Karpenter's ``Intersects``).

        Keys only one side defines are ignored. An empty intersection is still fine when both sides
        reduce to NotIn or DoesNotExist. Reasons for all failing keys are joined with ``"; "``.
        """
        small, large = self._by_key, other._by_key
        if len(small) > len(large):
            small, large = large, small
        reasons: list[str] | None = None
        for key in small:
            if key not in large:
                continue
            existing, incoming = self._by_key[key], other._by_key[key]
            if not _keys_intersect(existing, incoming):
                reasons = reasons or []
                reasons.append(f'key "{key}": requires {incoming.describe()}, allowed {existing.describe()}')
        return None if reasons is None else "; ".join(reasons)

    def _label_hint(self, key: str, allow_undefined: Iterable[str]) -> str:
        suffix = key.split("/", 1)[1] if "/" in key else key
        for candidates in (sorted(allow_undefined), sorted(self._by_key)):
            for candidate in candidates:
                if key in candidate or candidate.endswith(suffix):
                    return f' (typo of "{candidate}"?)'
        return ""

    # -- labels ------------------------------------------------------------------------------------

    def labels(self) -> dict[str, str]:
        """Labels Karpenter itself would put on a node for these requirements (its ``Labels()``).

        Every requirement with a value contributes ``any()`` (a single In value is that value; a
        multi-valued In gives its smallest; Exists/NotIn give an integer). Keys for which
        ``is_restricted_node_label`` holds are skipped: well-known labels come from the instance type
        and offering instead, and restricted domains are not Karpenter's to set.
        """
        out: dict[str, str] = {}
        for key, requirement in self._by_key.items():
            if is_restricted_node_label(key):
                continue
            value = requirement.any()
            if value is not None:
                out[key] = value
        return out

    def single_valued_labels(self) -> dict[str, str]:
        """Every key with exactly one allowed value, unfiltered (the provider's instance type labels)."""
        out: dict[str, str] = {}
        for key, requirement in self._by_key.items():
            if not requirement.complement and len(requirement._values) == 1:
                (out[key],) = requirement._values
        return out

    def matches_labels(self, labels: Mapping[str, str]) -> str | None:
        """None when a node with ``labels`` satisfies every requirement, else why not.

        A missing label satisfies only DoesNotExist and a plain NotIn, as in Kubernetes node affinity.
        """
        for key, requirement in self._by_key.items():
            value = labels.get(key)
            if value is None:
                if requirement._absent_ok:
                    continue
                return f'label "{key}" is missing, requires {requirement.describe()}'
            if not requirement.has(value):
                return f'label "{key}"="{value}" does not satisfy {requirement.describe()}'
        return None

    # -- minValues ---------------------------------------------------------------------------------

    def has_min_values(self) -> bool:
        return any(requirement.min_values is not None for requirement in self._by_key.values())

    def check_min_values(self, instance_type_labels: Iterable[Mapping[str, str]]) -> str | None:
        """None when, for every requirement with ``minValues``, the instance types' labels show at least
        that many distinct values the requirement allows; else which keys fall short.

        Karpenter counts every value of already-compatible instance types; counting only allowed values
        gives the same answer for those, and the right one for an unfiltered list.
        """
        with_min = self._with_min_values()
        if not with_min:
            return None
        seen: dict[str, set[str]] = {key: set() for key, _ in with_min}
        for labels in instance_type_labels:
            _collect_values(with_min, labels, seen)
        short = [
            f'"{key}" ({len(seen[key])} of {requirement.min_values})'
            for key, requirement in with_min
            if len(seen[key]) < (requirement.min_values or 0)
        ]
        if not short:
            return None
        return "minValues requirement is not met for label(s) " + ", ".join(short)

    def min_values_prefix(self, instance_type_labels: Iterable[Mapping[str, str]]) -> int | None:
        """How many of the instance types, taken in order (cheapest first), satisfy every ``minValues``;
        0 when there is none to satisfy, None when even all of them fall short (Karpenter's
        ``SatisfiesMinValues``, used to truncate the launch list without breaking flexibility)."""
        with_min = self._with_min_values()
        if not with_min:
            return 0
        seen: dict[str, set[str]] = {key: set() for key, _ in with_min}
        for index, labels in enumerate(instance_type_labels):
            _collect_values(with_min, labels, seen)
            if all(len(seen[key]) >= (requirement.min_values or 0) for key, requirement in with_min):
                return index + 1
        return None

    def _with_min_values(self) -> Sequence[tuple[str, Requirement]]:
        return [(key, r) for key, r in self._by_key.items() if r.min_values is not None]

    # -- rendering and identity --------------------------------------------------------------------

    def to_node_selector_requirements(self) -> list[dict[str, Any]]:
        """Kubernetes dicts (with ``minValues``), e.g. for a NodeClaim's ``spec.requirements``."""
        out: list[dict[str, Any]] = []
        for requirement in self._by_key.values():
            out.extend(requirement.to_node_selector_requirements())
        return out

    def __str__(self) -> str:
        """Karpenter's style: sorted requirements joined by ``", "``, hostname and the like left out."""
        return ", ".join(sorted(str(r) for key, r in self._by_key.items() if key not in wk.RESTRICTED_LABELS))

    def __repr__(self) -> str:
        return f"Requirements({', '.join(sorted(str(r) for r in self._by_key.values()))})"

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Requirements):
            return NotImplemented
        return self._by_key == other._by_key

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._by_key.values()))
        return self._hash


def _add_into(by_key: dict[str, Requirement], requirements: Iterable[Requirement]) -> None:
    for requirement in requirements:
        existing = by_key.get(requirement.key)
        by_key[requirement.key] = requirement if existing is None else requirement.intersection(existing)


def _keys_intersect(existing: Requirement, incoming: Requirement) -> bool:
    if existing.has_intersection(incoming):
        return True
    return incoming._operator in _ABSENCE_OPERATORS and existing._operator in _ABSENCE_OPERATORS


def _collect_values(
    with_min: Sequence[tuple[str, Requirement]], labels: Mapping[str, str], seen: dict[str, set[str]]
) -> None:
    for key, requirement in with_min:
        value = labels.get(key)
        if value is not None and requirement.has(value):
            seen[key].add(value)


def _term_requirements(term: Any) -> Iterator[Requirement]:
    for item in field_of(term, "matchExpressions", "match_expressions") or ():
        yield Requirement.from_node_selector_requirement(item)


def _required_terms(node_affinity: Any) -> list[Any]:
    required = field_of(
        node_affinity,
        "requiredDuringSchedulingIgnoredDuringExecution",
        "required_during_scheduling_ignored_during_execution",
    )
    return list(field_of(required, "nodeSelectorTerms", "node_selector_terms") or ())


def _preferred_terms(node_affinity: Any) -> list[Any]:
    return list(
        field_of(
            node_affinity,
            "preferredDuringSchedulingIgnoredDuringExecution",
            "preferred_during_scheduling_ignored_during_execution",
        )
        or ()
    )


def required_node_affinity_terms(pod: Any) -> list[Requirements]:
    """Each required node affinity term of a pod (or pod spec) as ``Requirements``, in order.

    Kubernetes ORs the terms. ``nodeSelector`` is not included; ``Requirements.from_pod(pod,
    required_term=i)`` gives term ``i`` together with it.
    """
    node_affinity = _node_affinity(pod)
    if node_affinity is None:
        return []
    return [Requirements(_term_requirements(term)) for term in _required_terms(node_affinity)]


def preferred_node_affinity_terms(pod: Any) -> list[tuple[int, Requirements]]:
    """``(weight, requirements)`` of each preferred node affinity term, heaviest first (stable)."""
    node_affinity = _node_affinity(pod)
    if node_affinity is None:
        return []
    terms = [
        (int(field_of(term, "weight") or 0), Requirements(_term_requirements(field_of(term, "preference"))))
        for term in _preferred_terms(node_affinity)
    ]
    terms.sort(key=lambda weighted: -weighted[0])
    return terms
