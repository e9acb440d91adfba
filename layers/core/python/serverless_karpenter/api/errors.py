"""Validation errors that name the object, the field as a user writes it, and the rule that was broken.

Validators inside the models raise :class:`RuleError` (a ``ValueError``, so pydantic collects it like any
other). :meth:`ManifestError.from_validation_error` then turns pydantic's ``ValidationError`` into one line a
platform engineer can act on::

    NodePool "default": spec.weight: must be between 1 and 100 (got 0)
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

# One step of a location inside a manifest: a field name (or map key) or a list index.
LocPart = str | int
Loc = tuple[LocPart, ...]


class RuleError(ValueError):
    """One or more broken rules, raised from a validator.

    ``at`` is relative to the value the validator checks, so a list validator can point at
    ``(3, "key")`` and the error lands on ``requirements[3].key``.
    """

    def __init__(self, rule: str, *, at: Loc = ()) -> None:
        super().__init__(rule)
        self.problems: list[tuple[Loc, str]] = [(at, rule)]

    @classmethod
    def of(cls, problems: Sequence[tuple[Loc, str]]) -> RuleError:
        first_at, first_rule = problems[0]
        err = cls(first_rule, at=first_at)
        err.problems = list(problems)
        return err


def raise_problems(problems: Sequence[tuple[Loc, str]]) -> None:
    """Raise every collected problem at once, so the user sees them all in one pass."""
    if problems:
        raise RuleError.of(problems)


@dataclass(frozen=True)
class FieldViolation:
    """One broken rule; ``field`` is the path a user writes, like ``spec.template.spec.taints[0].key``."""

    field: str
    rule: str

    def __str__(self) -> str:
        return f"{self.field}: {self.rule}" if self.field else self.rule


class ManifestError(ValueError):
    """A Karpenter manifest that breaks a rule; ``str()`` is one line, ``errors`` holds every violation."""

    def __init__(self, kind: str, name: str | None, errors: Sequence[FieldViolation]) -> None:
        if not errors:
            raise ValueError("ManifestError needs at least one violation")
        self.kind = kind
        self.name = name
        self.errors: list[FieldViolation] = list(errors)
        self.field = self.errors[0].field
        self.rule = self.errors[0].rule
        super().__init__(self._line())

    def _line(self) -> str:
        who = f'{self.kind} "{self.name}"' if self.name else f"{self.kind} (unnamed)"
        line = f"{who}: {self.errors[0]}"
        more = len(self.errors) - 1
        if more:
            line += f" (and {more} more error{'s' if more > 1 else ''})"
        return " ".join(line.split())

    def __str__(self) -> str:
        return self._line()

    def details(self) -> str:
        """Every violation, one per line, for CLIs that show the whole list."""
        who = f'{self.kind} "{self.name}"' if self.name else f"{self.kind} (unnamed)"
        return "\n".join(f"{who}: {violation}" for violation in self.errors)

    @classmethod
    def from_validation_error(
        cls,
        kind: str,
        name: str | None,
        exc: ValidationError,
        model: type[BaseModel] | None = None,
    ) -> ManifestError:
        return cls(kind, name, violations_from(exc, model))


def violations_from(exc: ValidationError, model: type[BaseModel] | None = None) -> list[FieldViolation]:
    """Translate pydantic's errors: aliases and list indexes into a user's path, jargon into rules."""
    out: list[FieldViolation] = []
    seen: set[FieldViolation] = set()
    for err in exc.errors(include_url=False):
        loc: Loc = tuple(err["loc"])
        ctx = err.get("ctx") or {}
        cause = ctx.get("error")
        if err["type"] == "value_error" and isinstance(cause, RuleError):
            pairs = [(loc + at, rule) for at, rule in cause.problems]
        else:
            pairs = [(loc, _friendly_rule(model, loc, err))]
        for full_loc, rule in pairs:
            path, _ = render_loc(model, full_loc)
            violation = FieldViolation(path, " ".join(rule.split()))
            if violation not in seen:
                seen.add(violation)
                out.append(violation)
    return out


# --- locations ---------------------------------------------------------------------------------------

_KEY_MARKER = "[key]"  # pydantic appends this when a map *key* (not its value) is invalid


def _strip(annotation: Any) -> Any:
    """Remove Annotated and Optional wrappers to reach the type that shapes the data."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
            continue
        if origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(members) == 1:
                annotation = members[0]
                continue
        return annotation


def _model_field(model: type[BaseModel], part: str) -> tuple[str, Any] | None:
    for field_name, info in model.model_fields.items():
        if part in (field_name, info.alias):
            return info.alias or field_name, info.annotation
    return None


def render_loc(model: type[BaseModel] | None, loc: Iterable[LocPart]) -> tuple[str, Any]:
    """``("spec", "template", "requirements", 0, "key")`` → ``spec.template.requirements[0].key``.

    Walks the model's types alongside the location, so that model fields print as ``.name`` and map keys
    as ``[key]`` (the Kubernetes convention, which keeps ``labels[karpenter.sh/foo]`` readable). Returns
    the path and the type reached, or None when the walk left the known types.
    """
    text = ""
    current: Any = model
    for part in loc:
        if part == _KEY_MARKER:
            continue
        current = _strip(current)
        origin = typing.get_origin(current)
        if isinstance(current, type) and issubclass(current, BaseModel) and isinstance(part, str):
            found = _model_field(current, part)
            if found is None:
                text += f".{part}"
                current = None
            else:
                alias, current = found
                text += f".{alias}"
        elif origin in (list, tuple, Sequence) or current in (list, tuple):
            text += f"[{part}]"
            args = typing.get_args(current)
            current = args[0] if args else None
        elif origin in (dict, Mapping) or current is dict:
            text += f"[{part}]"
            args = typing.get_args(current)
            current = args[1] if len(args) == 2 else None
        else:
            text += f"[{part}]" if isinstance(part, int) or not part.isidentifier() else f".{part}"
            current = None
    return text.lstrip("."), current


def _parent_model(model: type[BaseModel] | None, loc: Loc) -> type[BaseModel] | None:
    _, parent = render_loc(model, loc[:-1])
    parent = _strip(parent)
    if isinstance(parent, type) and issubclass(parent, BaseModel):
        return parent
    return None


# --- messages ------------------------------------------------------------------------------------------


def show(value: Any, limit: int = 80) -> str:
    """A short rendering of a user's value for ``(got ...)``."""
    text = repr(value) if isinstance(value, str) else _plain(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _plain(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return str(value)


def _quoted_choices(expected: str) -> list[str]:
    """pydantic's ``"'In', 'NotIn' or 'Gt'"`` back into ``["In", "NotIn", "Gt"]``."""
    parts = expected.replace(" or ", ", ").split(", ")
    return [p.strip().strip("'") for p in parts if p.strip()]


def _friendly_rule(model: type[BaseModel] | None, loc: Loc, err: Mapping[str, Any]) -> str:
    kind: str = err["type"]
    ctx: Mapping[str, Any] = err.get("ctx") or {}
    value = err.get("input")
    got = f" (got {show(value)})"
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        parent = _parent_model(model, loc)
        if parent is not None:
            known = sorted(info.alias or name for name, info in parent.model_fields.items())
            import difflib

            close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
            if close:
                return f"unknown field; did you mean {close[0]!r}?"
            return f"unknown field; expected one of: {', '.join(known)}"
        return "unknown field"
    if kind in ("literal_error", "enum"):
        _, reached = render_loc(model, loc)
        reached = _strip(reached)
        if typing.get_origin(reached) is typing.Literal:
            choices = [str(c) for c in typing.get_args(reached)]
        else:
            choices = _quoted_choices(str(ctx.get("expected", "")))
        return f"must be one of {', '.join(choices)}{got}"
    if kind == "string_type":
        return f"must be a string{got}"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"must be an integer{got}"
    if kind in ("float_type", "float_parsing"):
        return f"must be a number{got}"
    if kind in ("bool_type", "bool_parsing"):
        return f"must be true or false{got}"
    if kind in ("list_type", "tuple_type", "set_type"):
        return f"must be a list{got}"
    if kind in ("dict_type", "model_type", "model_attributes_type", "mapping_type"):
        return f"must be a mapping{got}"
    if kind == "too_short":
        n = ctx.get("min_length")
        return f"must have at least {n} item{'s' if n != 1 else ''} (got {ctx.get('actual_length')})"
    if kind == "too_long":
        n = ctx.get("max_length")
        return f"must have at most {n} item{'s' if n != 1 else ''} (got {ctx.get('actual_length')})"
    if kind == "string_too_short":
        return f"must be at least {ctx.get('min_length')} characters long{got}"
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters long{got}"
    if kind == "string_pattern_mismatch":
        return f"must match {ctx.get('pattern')}{got}"
    if kind == "greater_than_equal":
        return f"must be at least {ctx.get('ge')}{got}"
    if kind == "less_than_equal":
        return f"must be at most {ctx.get('le')}{got}"
    if kind == "greater_than":
        return f"must be greater than {ctx.get('gt')}{got}"
    if kind == "less_than":
        return f"must be less than {ctx.get('lt')}{got}"
    if kind == "value_error":
        msg = str(err.get("msg", ""))
        return msg.removeprefix("Value error, ")
    return str(err.get("msg", kind))
