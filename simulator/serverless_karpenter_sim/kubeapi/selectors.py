"""Label and field selectors, in the syntax and semantics of ``k8s.io/apimachinery``.

Label selectors: ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``, ``a>1``,
``a<1``; a ``!=`` or ``notin`` requirement also matches objects without the key, as upstream.
Field selectors: ``path=value``, ``path==value``, ``path!=value``, comma-joined; ``\\,`` escapes a comma.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ApiError, bad_request
from .kinds import FieldLabel

_QUALIFIED_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def qualified_name_error(key: str) -> str | None:
    """Why ``key`` is not a valid label/annotation key, or None."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and not prefix:
        return "prefix part must be non-empty"
    if prefix and (len(prefix) > 253 or not _QUALIFIED_PREFIX.match(prefix)):
        return "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters"
    if not name or len(name) > 63 or not _NAME_PART.match(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
            "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
            "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        )
    return None


def label_value_error(value: str) -> str | None:
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _VALUE.match(value):
        return (
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
            "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        )
    return None


def requirement_matches(op: str, key: str, values: Collection[str], labels: Mapping[str, str]) -> bool:
    """One requirement in apimachinery's semantics (``op``: in, notin, exists, !, gt, lt): a ``notin``
    also matches labels without the key; ``gt``/``lt`` compare integers and need exactly one value. The
    one matcher of the simulator: the API server's selectors and the cluster's (scheduler, node
    selectors, PDBs, workloads, through ``cluster.objects.expression_matches``) both use it."""
    if op == "in":
        value = labels.get(key)
        return value is not None and value in values
    if op == "notin":
        return labels.get(key) not in values
    if op == "exists":
        return key in labels
    if op == "!":
        return key not in labels
    value = labels.get(key)
    if value is None or len(values) != 1:
        return False
    try:
        have, want = int(value), int(next(iter(values)))
    except ValueError:
        return False
    return have > want if op == "gt" else have < want


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "in" | "notin" | "exists" | "!" | "gt" | "lt"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return requirement_matches(self.op, self.key, self.values, labels)


LabelSelector = tuple[Requirement, ...]
EVERYTHING: LabelSelector = ()


def matches(selector: LabelSelector, labels: Mapping[str, str] | None) -> bool:
    labels = labels or {}
    return all(req.matches(labels) for req in selector)


_TOKEN = re.compile(r"\s*(==|!=|=|!|\(|\)|,|>|<|[^\s=!(),<>]+)")


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:  # only trailing whitespace can fail to match, and it was stripped
            raise bad_request(f"unable to parse requirement: unexpected character at {pos} in {text!r}")
        out.append(m.group(1))
        pos = m.end()
    return out


_OPERATOR_TOKENS = {"==", "!=", "=", "!", "(", ")", ",", ">", "<"}


def _parse_error(text: str, why: str) -> ApiError:
    return bad_request(f"unable to parse requirement: {why}: {text!r}")


def parse_label_selector(text: str | None) -> LabelSelector:
    if not text or not text.strip():
        return EVERYTHING
    toks = _tokens(text)
    reqs: list[Requirement] = []
    i = 0

    def take() -> str | None:
        nonlocal i
        if i >= len(toks):
            return None
        tok = toks[i]
        i += 1
        return tok

    def key_token() -> str:
        tok = take()
        if tok is None or tok in _OPERATOR_TOKENS:
            raise _parse_error(text, "found '" + (tok or "") + "', expected: identifier")
        why = qualified_name_error(tok)
        if why:
            raise _parse_error(text, f"invalid label key {tok!r}: {why}")
        return tok

    def value_token(allow_empty: bool) -> str:
        nonlocal i
        tok = toks[i] if i < len(toks) else None
        if tok is None or tok in (",", ")"):
            if allow_empty:
                return ""
            raise _parse_error(text, "expected a value")
        if tok in _OPERATOR_TOKENS:
            raise _parse_error(text, f"found {tok!r}, expected: identifier")
        i += 1
        why = label_value_error(tok)
        if why:
            raise _parse_error(text, f"invalid label value {tok!r}: {why}")
        return tok

    while True:
        tok = toks[i] if i < len(toks) else None
        if tok == "!":
            i += 1
            reqs.append(Requirement(key_token(), "!"))
        else:
            key = key_token()
            op = take()
            if op is None or op == ",":
                reqs.append(Requirement(key, "exists"))
                if op is None:
                    break
                continue
            if op in ("=", "=="):
                reqs.append(Requirement(key, "in", frozenset({value_token(allow_empty=True)})))
            elif op == "!=":
                reqs.append(Requirement(key, "notin", frozenset({value_token(allow_empty=True)})))
            elif op in (">", "<"):
                value = value_token(allow_empty=False)
                if not value.lstrip("-").isdigit():
                    raise _parse_error(
                        text, f"for 'Gt', 'Lt' operators, the value must be an integer: {value}"
                    )
                reqs.append(Requirement(key, "gt" if op == ">" else "lt", frozenset({value})))
            elif op in ("in", "notin"):
                if take() != "(":
                    raise _parse_error(text, "expected '('")
                values: set[str] = set()
                while True:
                    values.add(value_token(allow_empty=True))
                    sep = take()
                    if sep == ")":
                        break
                    if sep != ",":
                        raise _parse_error(text, "expected ',' or ')'")
                reqs.append(Requirement(key, op, frozenset(values)))
            else:
                raise _parse_error(text, f"found {op!r}, expected: in, notin, =, ==, !=, gt, lt")
        sep = take()
        if sep is None:
            break
        if sep != ",":
            raise _parse_error(text, f"found {sep!r}, expected: ','")
    return tuple(reqs)


def from_label_selector_object(selector: Mapping[str, Any] | None) -> LabelSelector | None:
    """A ``metav1.LabelSelector`` as requirements; None for a nil selector (which matches nothing)."""
    if selector is None:
        return None
    reqs = [Requirement(k, "in", frozenset({v})) for k, v in (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or []:
        op = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}.get(
            expr.get("operator", "")
        )
        if op is None:
            return None  # an invalid selector matches nothing, as upstream's eviction treats it
        reqs.append(Requirement(expr["key"], op, frozenset(expr.get("values") or ())))
    return tuple(reqs)


@dataclass(frozen=True)
class FieldRequirement:
    label: FieldLabel
    equal: bool
    value: str


FieldSelector = tuple[FieldRequirement, ...]


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    escaped = False
    for ch in text:
        if escaped:
            current.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def parse_field_selector(text: str | None, supported: Mapping[str, FieldLabel]) -> FieldSelector:
    if not text or not text.strip():
        return ()
    reqs: list[FieldRequirement] = []
    for raw_term in _split_unescaped(text, ","):
        term = raw_term.strip()
        if not term:
            continue
        for op in ("!=", "==", "="):
            key, found, value = term.partition(op)
            if found:
                break
        else:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{term}'")
        key = key.strip()
        label = supported.get(key)
        if label is None:
            raise bad_request(f"field label not supported: {key}")
        reqs.append(FieldRequirement(label, op != "!=", value.strip()))
    return tuple(reqs)


def field_value(obj: Mapping[str, Any], label: FieldLabel) -> str:
    node: Any = obj
    for part in label.path:
        if not isinstance(node, Mapping):
            return label.default
        node = node.get(part)
        if node is None:
            return label.default
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


def fields_match(selector: FieldSelector, obj: Mapping[str, Any]) -> bool:
    return all((field_value(obj, req.label) == req.value) == req.equal for req in selector)
