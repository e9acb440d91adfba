"""The CEL of ``x-kubernetes-validations``, as kube-apiserver evaluates it, on top of cel-python (``celpy``).

Kubernetes CEL is standard CEL plus a few libraries. cel-python has the standard macros (``all``,
``exists``, ``exists_one``, ``filter``, ``map``, ``has``), ``size``, ``startsWith``, ``endsWith`` and
``matches``; the functions Karpenter's rules use beyond those are registered here, written to Kubernetes'
semantics:

- ``find(regex)`` (Kubernetes' regex library): the first match, or ``""``;
- ``split(separator)`` (cel-go's strings extension);
- ``matches(regex)`` and ``int(string)`` are replaced, because Go's regexes and ``strconv`` differ from
  Python's: ``$`` ends the text (Python's also matches before a final newline), ``\\d`` is ASCII only, and
  ``int(" 5")`` or ``int("1_0")`` are errors, as is a value past int64.

A rule that mentions ``oldSelf`` is a transition rule: it runs on update only, where an old value exists.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import celpy
from celpy import celtypes
from celpy.evaluation import CELEvalError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_GO_INTEGER = re.compile(r"[+-]?[0-9]+")
_lock = threading.Lock()  # celpy's parser is shared; compile one rule at a time


@lru_cache(maxsize=512)
def go_regex(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled with Go's RE2 meaning of ``$`` (end of text) and ASCII classes."""
    out: list[str] = []
    escaped = in_class = False
    for char in pattern:
        if escaped:
            out.append(char)
            escaped = False
        elif char == "\\":
            out.append(char)
            escaped = True
        elif in_class:
            out.append(char)
            in_class = char != "]"
        elif char == "[":
            out.append(char)
            in_class = True
        elif char == "$":
            out.append(r"\Z")
        else:
            out.append(char)
    return re.compile("".join(out), re.ASCII)


def _find(text: celtypes.StringType, pattern: celtypes.StringType) -> celtypes.StringType:
    match = go_regex(str(pattern)).search(str(text))
    return celtypes.StringType(match.group(0) if match else "")


def _matches(text: celtypes.StringType, pattern: celtypes.StringType) -> celtypes.BoolType:
    return celtypes.BoolType(go_regex(str(pattern)).search(str(text)) is not None)


def _split(text: celtypes.StringType, separator: celtypes.StringType) -> celtypes.ListType:
    return celtypes.ListType([celtypes.StringType(part) for part in str(text).split(str(separator))])


def _int(value: Any) -> celtypes.IntType:
    if isinstance(value, celtypes.StringType):
        text = str(value)
        if not _GO_INTEGER.fullmatch(text, pos=0) or not INT64_MIN <= int(text) <= INT64_MAX:
            raise ValueError(f'strconv.ParseInt: parsing "{text}": invalid syntax')
        return celtypes.IntType(int(text))
    return celtypes.IntType(value)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "find": _find,
    "matches": _matches,
    "split": _split,
    "int": _int,
}


class RuleError(Exception):
    """A rule that could not be evaluated (a missing key, a bad conversion); upstream says invalid."""


@dataclass(frozen=True)
class CompiledRule:
    text: str
    program: celpy.Runner
    transition: bool

    def holds(self, value: Any, old: Any | None) -> bool:
        """Whether the rule holds of ``value`` (and ``old``, for a transition rule). CEL without a clock is
        a pure function of its activation, so an answer is remembered by the JSON of its inputs: the
        1,000 NodeClaims of one NodePool carry the same requirements, and each create evaluated every
        rule on them again (interpreted cel-python: 16% of a 1,000-node launch burst)."""
        old_json = _canonical(old) if self.transition else None
        holds, error = _evaluated(self, _canonical(value), old_json)
        if error is not None:
            raise RuleError(error)
        return holds

    def evaluate(self, value: Any, old: Any | None) -> bool:
        activation = {"self": celpy.json_to_cel(value)}
        if self.transition:
            activation["oldSelf"] = celpy.json_to_cel(old)
        try:
            result = self.program.evaluate(activation)
        except CELEvalError as err:
            raise RuleError(_describe(err)) from err
        if isinstance(result, CELEvalError):
            raise RuleError(_describe(result))
        return bool(result)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


# Bounded small: a value may be a whole object (a root rule's self), and what repeats is a burst's
# identical values, a few per rule.
@lru_cache(maxsize=4_096)
def _evaluated(rule: CompiledRule, value_json: str, old_json: str | None) -> tuple[bool, str | None]:
    """(holds, None), or (False, the evaluation error's message)."""
    old = json.loads(old_json) if old_json is not None else None
    try:
        return rule.evaluate(json.loads(value_json), old), None
    except RuleError as err:
        return False, str(err)


_NO_MEMBER = re.compile(r"no such member in mapping: '(?P<key>[^']*)'")


def _describe(err: CELEvalError) -> str:
    """cel-go's wording of an evaluation error (``no such key: values``) where cel-python's can be mapped."""
    args = err.args
    message = str(args[0]) if args else "evaluation error"
    missing = _NO_MEMBER.search(message)
    if missing:
        return f"no such key: {missing['key']}"
    if "CELEvalError" in message:  # an error inside a conditional: cel-python loses the inner one
        return "no such key or overload in a conditional's operand"
    if len(args) >= 3 and isinstance(args[2], tuple) and args[2]:
        return str(args[2][0])
    return message


@lru_cache(maxsize=1024)
def compile_rule(text: str) -> CompiledRule:
    """The rule, compiled once; a rule that does not parse is a defect of the CRD file (ValueError)."""
    with _lock:
        env = celpy.Environment()
        try:
            ast = env.compile(text)
        except celpy.CELParseError as err:
            raise ValueError(f"x-kubernetes-validations rule does not compile: {text!r}: {err}") from err
        program = env.program(ast, functions=FUNCTIONS)
    return CompiledRule(text, program, transition=re.search(r"\boldSelf\b", text) is not None)
