"""``iam:SimulatePrincipalPolicy`` for the simulated account.

moto keeps IAM's data (roles, users, groups, inline and managed policies, permissions boundaries) but does
not implement IAM's policy simulator, so ``doctor``'s Lambda-permissions check could not run against it.
This module evaluates a principal's policies as IAM's simulator does and answers in the API's own shape,
so that the doctor (and anything else) reads the simulated account exactly as it reads AWS.

The evaluation follows IAM's documented logic for identity policies in one account:

- an explicit ``Deny`` in any policy wins, then an ``Allow``, else the decision is ``implicitDeny``;
- a permissions boundary (the principal's, or ``PermissionsBoundaryPolicyInputList``) must allow too;
- ``Action``/``NotAction`` match with ``*`` and ``?``, ignoring case; ``Resource``/``NotResource`` match
  with ``*`` and ``?``, minding case. The simulated resource is matched as a string: without
  ``ResourceArns`` it is ``*``, which only a ``"Resource": "*"`` statement matches. AWS's simulator does
  the same, so a role whose policies name their resources is ``implicitDeny`` unless the caller names a
  resource (https://github.com/cloud-custodian/cloud-custodian/issues/4612);
- conditions are evaluated against ``ContextEntries``. A key the caller did not supply makes its
  condition false (true for the negated operators, ``...IfExists`` and ``ForAllValues:``, and ``Null``
  tests exactly that), as IAM treats a key missing from the request context. So an ``Allow`` that holds
  only under a condition counts as allowed only when the caller passed matching context, and the keys it
  lacked are listed in ``MissingContextValues``, as AWS's simulator reports them
  (https://github.com/aws-containers/amazon-ecs-exec-checker/issues/44). Counting every conditional
  ``Allow`` as allowed would be simpler, but would pass a role whose grants are conditioned on tags its
  calls never carry.

Not modelled: resource policies (``ResourcePolicy``, ``CallerArn``), service control policies, policy
variables (``${aws:username}`` is matched literally), ``ResourceHandlingOption``, statement positions in
``MatchedStatements``, and paging (every result comes in one page).

Importing this module installs the action on moto's IAM responses (see :func:`install`); the package's
``__init__`` imports it, so every moto server the simulator starts answers it.
"""

from __future__ import annotations

import datetime
import importlib.abc
import importlib.machinery
import ipaddress
import json
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from types import ModuleType
from typing import Any, Literal
from urllib.parse import unquote

Decision = Literal["allowed", "explicitDeny", "implicitDeny"]
ALLOWED: Decision = "allowed"
EXPLICIT_DENY: Decision = "explicitDeny"
IMPLICIT_DENY: Decision = "implicitDeny"
# Most restrictive first: the aggregate decision over several resources is the first one any reaches.
_RESTRICTIVENESS: tuple[Decision, ...] = (EXPLICIT_DENY, IMPLICIT_DENY, ALLOWED)

# A request context: condition key (lower case: IAM's keys are case-insensitive) -> its values.
Context = Mapping[str, Sequence[str]]


@dataclass(frozen=True)
class SourcePolicy:
    """One policy in a simulation, named as ``MatchedStatements`` name it."""

    id: str  # SourcePolicyId: the inline policy's name, the managed policy's name, or PolicyInputList.N
    type: str  # SourcePolicyType: user, group, role, aws-managed, user-managed or none
    document: Mapping[str, Any] = field(compare=False)  # (id, type) name a policy


@dataclass(frozen=True)
class Evaluation:
    decision: Decision
    # The statements that decided it: the Deny ones for explicitDeny, the Allow ones for allowed.
    matched: tuple[SourcePolicy, ...] = ()
    missing_context: tuple[str, ...] = ()
    allowed_by_boundary: bool | None = None  # None: no permissions boundary applies


# -- matching --------------------------------------------------------------------------------------------


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


@lru_cache(maxsize=4096)
def _wildcard(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    """IAM's wildcards: ``*`` any run of characters, ``?`` any one; everything else literal."""
    body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(body, re.DOTALL | (re.IGNORECASE if ignore_case else 0))


def wildcard_match(pattern: str, value: str, *, ignore_case: bool = False) -> bool:
    return _wildcard(pattern, ignore_case).fullmatch(value) is not None


def action_matches(statement: Mapping[str, Any], action: str) -> bool:
    if "Action" in statement:
        return any(wildcard_match(str(p), action, ignore_case=True) for p in _as_list(statement["Action"]))
    if "NotAction" in statement:
        return not any(
            wildcard_match(str(p), action, ignore_case=True) for p in _as_list(statement["NotAction"])
        )
    return False


def resource_matches(statement: Mapping[str, Any], resource: str) -> bool:
    # An identity policy statement without Resource or NotResource is invalid; IAM would have refused it.
    if "Resource" in statement:
        return any(wildcard_match(str(p), resource) for p in _as_list(statement["Resource"]))
    if "NotResource" in statement:
        return not any(wildcard_match(str(p), resource) for p in _as_list(statement["NotResource"]))
    return False


# -- conditions ------------------------------------------------------------------------------------------


def _number(value: str) -> float:
    return float(value)


def _date(value: str) -> datetime.datetime:
    try:
        return datetime.datetime.fromtimestamp(float(value), tz=datetime.UTC)
    except ValueError:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


def _arn_like(pattern: str, arn: str) -> bool:
    """ARN operators match each of the six colon-separated parts on its own, wildcards included."""
    pattern_parts, arn_parts = pattern.split(":", 5), arn.split(":", 5)
    return len(pattern_parts) == len(arn_parts) == 6 and all(
        wildcard_match(p, a) for p, a in zip(pattern_parts, arn_parts, strict=True)
    )


def _in_network(address: str, network: str) -> bool:
    return ipaddress.ip_address(address) in ipaddress.ip_network(network, strict=False)


Compare = Callable[[str, str], bool]  # (the context's value, the policy's value) -> matches


def _compare_numbers(test: Callable[[float, float], bool]) -> Compare:
    return lambda value, wanted: test(_number(value), _number(wanted))


def _compare_dates(test: Callable[[datetime.datetime, datetime.datetime], bool]) -> Compare:
    return lambda value, wanted: test(_date(value), _date(wanted))


# Operator -> (how one context value compares with one policy value, whether the operator is negated).
# A negated operator holds when no value matches; written as its positive comparison and the flag.
_OPERATORS: dict[str, tuple[Compare, bool]] = {
    "StringEquals": (lambda v, w: v == w, False),
    "StringNotEquals": (lambda v, w: v == w, True),
    "StringEqualsIgnoreCase": (lambda v, w: v.casefold() == w.casefold(), False),
    "StringNotEqualsIgnoreCase": (lambda v, w: v.casefold() == w.casefold(), True),
    "StringLike": (lambda v, w: wildcard_match(w, v), False),
    "StringNotLike": (lambda v, w: wildcard_match(w, v), True),
    "NumericEquals": (_compare_numbers(lambda v, w: v == w), False),
    "NumericNotEquals": (_compare_numbers(lambda v, w: v == w), True),
    "NumericLessThan": (_compare_numbers(lambda v, w: v < w), False),
    "NumericLessThanEquals": (_compare_numbers(lambda v, w: v <= w), False),
    "NumericGreaterThan": (_compare_numbers(lambda v, w: v > w), False),
    "NumericGreaterThanEquals": (_compare_numbers(lambda v, w: v >= w), False),
    "DateEquals": (_compare_dates(lambda v, w: v == w), False),
    "DateNotEquals": (_compare_dates(lambda v, w: v == w), True),
    "DateLessThan": (_compare_dates(lambda v, w: v < w), False),
    "DateLessThanEquals": (_compare_dates(lambda v, w: v <= w), False),
    "DateGreaterThan": (_compare_dates(lambda v, w: v > w), False),
    "DateGreaterThanEquals": (_compare_dates(lambda v, w: v >= w), False),
    "Bool": (lambda v, w: v.lower() == w.lower(), False),
    "BinaryEquals": (lambda v, w: v == w, False),
    "IpAddress": (_in_network, False),
    "NotIpAddress": (_in_network, True),
    "ArnEquals": (lambda v, w: _arn_like(w, v), False),
    "ArnLike": (lambda v, w: _arn_like(w, v), False),
    "ArnNotEquals": (lambda v, w: _arn_like(w, v), True),
    "ArnNotLike": (lambda v, w: _arn_like(w, v), True),
}
_SET_QUALIFIERS = ("ForAllValues", "ForAnyValue")


class UnsupportedCondition(ValueError):
    """A condition operator IAM does not have: the policy would not have been accepted."""


def _policy_value(value: Any) -> str:
    # JSON booleans and numbers are written as strings in most policies, but not all.
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _condition_holds(operator: str, key: str, wanted: Sequence[str], context: Context) -> bool:
    qualifier, _, base = operator.rpartition(":")
    if qualifier and qualifier not in _SET_QUALIFIERS:
        raise UnsupportedCondition(operator)
    values = context.get(key.lower())
    if base == "Null":
        # "true": the key must be absent; "false": present.
        return (values is None) == (wanted[0].lower() == "true") if wanted else False
    if_exists = base.endswith("IfExists")
    base = base.removesuffix("IfExists")
    if base not in _OPERATORS:
        raise UnsupportedCondition(operator)
    compare, negated = _OPERATORS[base]
    if values is None:
        if if_exists or qualifier == "ForAllValues":
            return True
        return negated and qualifier != "ForAnyValue"

    def matches(value: str) -> bool:
        try:
            return any(compare(value, w) for w in wanted)
        except ValueError:  # not a number, date or address: no match, as IAM treats a malformed value
            return False

    def holds(value: str) -> bool:
        return not matches(value) if negated else matches(value)

    if qualifier == "ForAllValues":
        return all(holds(v) for v in values)
    if qualifier == "ForAnyValue":
        return any(holds(v) for v in values)
    return not any(matches(v) for v in values) if negated else any(matches(v) for v in values)


def condition_keys(statement: Mapping[str, Any]) -> list[str]:
    """The context keys the statement's conditions read; a ``Null`` check asks only whether one is there."""
    return [
        str(key)
        for operator, block in (statement.get("Condition") or {}).items()
        if operator.rpartition(":")[2] != "Null"
        for key in block
    ]


def conditions_hold(statement: Mapping[str, Any], context: Context) -> bool:
    """Every operator, and every key under it, must hold (AND); any one policy value may match (OR)."""
    for operator, block in (statement.get("Condition") or {}).items():
        for key, wanted in block.items():
            if not _condition_holds(operator, key, [_policy_value(w) for w in _as_list(wanted)], context):
                return False
    return True


# -- evaluation ------------------------------------------------------------------------------------------


def _statements(document: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [s for s in _as_list(document.get("Statement")) if isinstance(s, Mapping)]


def _decide(
    policies: Sequence[SourcePolicy], action: str, resource: str, context: Context
) -> tuple[Decision, tuple[SourcePolicy, ...], set[str]]:
    allows: list[SourcePolicy] = []
    denies: list[SourcePolicy] = []
    missing: set[str] = set()
    for policy in policies:
        for statement in _statements(policy.document):
            if not (action_matches(statement, action) and resource_matches(statement, resource)):
                continue
            missing.update(k for k in condition_keys(statement) if k.lower() not in context)
            if not conditions_hold(statement, context):
                continue
            (denies if statement.get("Effect") == "Deny" else allows).append(policy)
    if denies:
        return EXPLICIT_DENY, tuple(dict.fromkeys(denies)), missing
    if allows:
        return ALLOWED, tuple(dict.fromkeys(allows)), missing
    return IMPLICIT_DENY, (), missing


def evaluate(
    policies: Sequence[SourcePolicy],
    action: str,
    resource: str = "*",
    context: Context | None = None,
    boundary: Sequence[SourcePolicy] | None = None,
) -> Evaluation:
    """IAM's decision on ``action`` on ``resource`` for a principal holding ``policies``, within the
    permissions ``boundary`` when it has one. ``context``'s keys are lower case: see
    :func:`request_context`."""
    context = context or {}
    decision, matched, missing = _decide(policies, action, resource, context)
    if boundary is None:
        return Evaluation(decision, matched, tuple(sorted(missing)))
    bounded, bounded_matched, bounded_missing = _decide(boundary, action, resource, context)
    missing_context = tuple(sorted(missing | bounded_missing))
    if decision == EXPLICIT_DENY:
        return Evaluation(decision, matched, missing_context, bounded == ALLOWED)
    if bounded == EXPLICIT_DENY:
        return Evaluation(EXPLICIT_DENY, bounded_matched, missing_context, False)
    if decision == ALLOWED and bounded != ALLOWED:
        return Evaluation(IMPLICIT_DENY, (), missing_context, False)
    return Evaluation(decision, matched, missing_context, bounded == ALLOWED)


def request_context(entries: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """``ContextEntries`` as :func:`evaluate` reads them."""
    return {
        str(e["ContextKeyName"]).lower(): [str(v) for v in e.get("ContextKeyValues") or []] for e in entries
    }


def most_restrictive(decisions: Iterable[Decision]) -> Decision:
    seen = set(decisions)
    return next((d for d in _RESTRICTIVENESS if d in seen), IMPLICIT_DENY)


# -- the principal's policies in moto's backend ----------------------------------------------------------


def document(text: str | Mapping[str, Any]) -> dict[str, Any]:
    """A policy document as moto stores it: JSON, sometimes URL-encoded."""
    if isinstance(text, Mapping):
        return dict(text)
    parsed = json.loads(unquote(text) if text.lstrip().startswith("%") else text)
    return parsed if isinstance(parsed, dict) else {}


def _managed(policies: Iterable[Any]) -> list[SourcePolicy]:
    out = []
    for policy in policies:
        default = next(v for v in policy.versions if v.version_id == policy.default_version_id)
        kind = "aws-managed" if ":aws:policy/" in policy.arn else "user-managed"
        out.append(SourcePolicy(policy.name, kind, document(default.document)))
    return out


def _inline(policies: Mapping[str, str], kind: str) -> list[SourcePolicy]:
    return [SourcePolicy(name, kind, document(text)) for name, text in policies.items()]


def principal_policies(backend: Any, arn: str) -> tuple[list[SourcePolicy], list[SourcePolicy] | None]:
    """The identity policies of the user, group or role ``arn`` names, and its permissions boundary."""
    from moto.iam.exceptions import InvalidInput

    parts = arn.split(":", 5)
    kind, _, path = (parts[5] if len(parts) == 6 else "").partition("/")
    name = path.rsplit("/", 1)[-1]
    if kind == "role":
        role = backend.get_role_by_arn(arn)
        policies = _inline(role.policies, "role") + _managed(role.managed_policies.values())
        boundary_arn = role.permissions_boundary_arn
        boundary = _managed([backend.get_policy(boundary_arn)]) if boundary_arn else None
        return policies, boundary
    if kind == "user":
        user = backend.get_user(name)
        policies = _inline(user.policies, "user") + _managed(user.managed_policies.values())
        for group in backend.get_groups_for_user(name):
            policies += _inline(group.policies, "group") + _managed(group.managed_policies.values())
        return policies, None
    if kind == "group":
        group = backend.get_group(name)
        return _inline(group.policies, "group") + _managed(group.managed_policies.values()), None
    raise InvalidInput(f"PolicySourceArn {arn} is not the ARN of an IAM user, group or role")


# -- the API ---------------------------------------------------------------------------------------------


def _statement_refs(policies: Iterable[SourcePolicy]) -> list[dict[str, str]]:
    return [{"SourcePolicyId": p.id, "SourcePolicyType": p.type} for p in dict.fromkeys(policies)]


def simulate(
    policies: Sequence[SourcePolicy],
    boundary: Sequence[SourcePolicy] | None,
    actions: Sequence[str],
    resources: Sequence[str] | None,
    context_entries: Iterable[Mapping[str, Any]],
) -> dict[str, Any]:
    """The ``SimulatePrincipalPolicy`` response: one result per action. With ``ResourceArns``, the
    top-level decision is the most restrictive over them and each has its ``ResourceSpecificResults``
    entry, as IAM now answers."""
    supplied = request_context(context_entries)
    results = []
    for action in actions:
        evaluations = [(r, evaluate(policies, action, r, supplied, boundary)) for r in resources or ["*"]]
        result: dict[str, Any] = {
            "EvalActionName": action,
            "EvalDecision": most_restrictive(e.decision for _, e in evaluations),
            "MatchedStatements": _statement_refs(p for _, e in evaluations for p in e.matched),
            "MissingContextValues": sorted({k for _, e in evaluations for k in e.missing_context}),
        }
        if len(evaluations) == 1:
            result["EvalResourceName"] = evaluations[0][0]
        if boundary is not None:
            result["PermissionsBoundaryDecisionDetail"] = {
                "AllowedByPermissionsBoundary": all(e.allowed_by_boundary for _, e in evaluations)
            }
        if resources:
            result["ResourceSpecificResults"] = [
                {
                    "EvalResourceName": resource,
                    "EvalResourceDecision": e.decision,
                    "MatchedStatements": _statement_refs(e.matched),
                    "MissingContextValues": list(e.missing_context),
                }
                for resource, e in evaluations
            ]
        results.append(result)
    return {"EvaluationResults": results, "IsTruncated": False}


def _simulate_principal_policy(self: Any) -> Any:
    """``IamResponse.simulate_principal_policy``: moto dispatches the action to the method of that name."""
    from moto.core.responses import ActionResult

    extra = [
        SourcePolicy(f"PolicyInputList.{n}", "none", document(text))
        for n, text in enumerate(self._get_param("PolicyInputList") or [], start=1)
    ]
    policies, boundary = principal_policies(self.backend, self._get_param("PolicySourceArn"))
    boundary_inputs = self._get_param("PermissionsBoundaryPolicyInputList") or []
    if boundary_inputs:
        boundary = [
            SourcePolicy(f"PermissionsBoundaryPolicyInputList.{n}", "none", document(text))
            for n, text in enumerate(boundary_inputs, start=1)
        ]
    try:
        response = simulate(
            policies + extra,
            boundary,
            self._get_param("ActionNames") or [],
            self._get_param("ResourceArns") or None,
            self._get_param("ContextEntries") or [],
        )
    except UnsupportedCondition as error:
        from moto.iam.exceptions import InvalidInput

        raise InvalidInput(f"unsupported condition operator {error}") from error
    return ActionResult(response)


# -- installing it in moto -------------------------------------------------------------------------------

_RESPONSES_MODULE = "moto.iam.responses"


def register(responses: ModuleType) -> None:
    # moto looks the action's method up on the class at each request, so adding it is enough.
    setattr(responses.IamResponse, "simulate_principal_policy", _simulate_principal_policy)  # noqa: B010


class _RegisterOnImport(importlib.abc.MetaPathFinder):
    """Calls ``register`` with moto's module ``fullname`` when moto first imports it.

    Importing moto's modules here instead would cost every ``serverless-karpenter`` command, ``--help``
    included, most of a second (moto's IAM models load the AWS-managed policies), for what only a running
    moto server needs.
    """

    def __init__(self, fullname: str, register: Callable[[ModuleType], None]) -> None:
        self.fullname = fullname
        self.register = register

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.fullname:
            return None
        sys.meta_path.remove(self)  # once; and the finders below locate the module itself
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _RegisteringLoader(spec.loader, self.register)
        return spec


class _RegisteringLoader(importlib.abc.Loader):
    """The module's own loader, then ``register`` with the module it executed. Anything else asked of the
    loader (its source, its resources) is the own loader's answer."""

    def __init__(self, loader: importlib.abc.Loader, register: Callable[[ModuleType], None]) -> None:
        self._loader = loader
        self._register = register

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        self._register(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


def when_imported(fullname: str, register: Callable[[ModuleType], None]) -> None:
    """Call ``register`` with the module ``fullname`` (one of moto's) now if it is imported, else as soon as
    it is; once in this process."""
    if fullname in sys.modules:
        register(sys.modules[fullname])
    elif not any(
        isinstance(finder, _RegisterOnImport) and finder.fullname == fullname for finder in sys.meta_path
    ):
        sys.meta_path.insert(0, _RegisterOnImport(fullname, register))


def install() -> None:
    """Make moto answer ``SimulatePrincipalPolicy`` in this process, now or when its IAM is imported."""
    when_imported(_RESPONSES_MODULE, register)


install()
