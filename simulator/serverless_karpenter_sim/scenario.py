"""Scenario files: manifests to apply, then steps to run on virtual time."""

from __future__ import annotations

from importlib import resources as package_resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from serverless_karpenter.api.common import parse_duration as core_parse_duration
from serverless_karpenter.api.errors import ManifestError
from serverless_karpenter.api.manifests import is_karpenter_kind, parse_manifest

from serverless_karpenter_sim.availability import DISRUPTION_PENDING_BOUND_SECONDS
from serverless_karpenter_sim.drains import DRAIN_MARGIN_SECONDS

STEP_KINDS = ("wait", "event", "scale", "apply", "delete", "sqs", "fault", "ec2", "patch", "ami", "karpenter")


class ScenarioError(ValueError):
    """A scenario that cannot run; the message is one line naming what is wrong."""


def parse_duration(text: str | int | float) -> float:
    """Seconds: a number, or a duration as Karpenter's fields write them (90s, 5m, 1h30m), read by the
    core's one duration parser; ``Never`` has no length, so a scenario cannot wait for it."""
    if isinstance(text, int | float):
        return float(text)
    try:
        value = core_parse_duration(text.strip())
    except ValueError:
        value = None
    if value is None:
        raise ValueError(f"{text!r} is not a duration like 90s, 5m or 1h30m")
    return value.total_seconds()


class Step(BaseModel):
    """One step: exactly one of wait, event, scale, apply, delete, sqs, fault, ec2, patch, ami (those
    three: see ``scenario_steps``), karpenter (what an in-cluster Karpenter left: ``karpenter_world``)."""

    model_config = ConfigDict(extra="forbid")

    wait: float | None = None
    event: dict[str, Any] | None = None
    scale: dict[str, Any] | None = None
    apply: list[dict[str, Any]] | None = None
    delete: dict[str, Any] | None = None
    sqs: str | None = None
    fault: dict[str, Any] | None = None
    ec2: dict[str, Any] | None = None
    patch: dict[str, Any] | None = None
    ami: dict[str, Any] | None = None
    karpenter: dict[str, Any] | None = None

    @field_validator("wait", mode="before")
    @classmethod
    def _wait(cls, value: Any) -> float:
        return parse_duration(value)

    @field_validator("apply", mode="before")
    @classmethod
    def _apply(cls, value: Any) -> Any:
        return [value] if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _exactly_one(self) -> Step:
        present = [k for k in STEP_KINDS if getattr(self, k) is not None]
        if len(present) != 1:
            raise ValueError(
                f"a step needs exactly one of {', '.join(STEP_KINDS)} (got {', '.join(present) or 'none'})"
            )
        return self

    @property
    def kind(self) -> str:
        return next(k for k in STEP_KINDS if getattr(self, k) is not None)


class InvariantBounds(BaseModel):
    """The bounds a scenario's invariants hold it to (``invariants:``); each defaults to its constant."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    # How long a pod evicted by a voluntary disruption may wait for a Running replacement.
    disruption_pending_seconds: float = Field(
        default=DISRUPTION_PENDING_BOUND_SECONDS, alias="disruptionPendingSeconds", gt=0
    )
    # How long past its terminationGracePeriod (or the 15-minute default) a deleting node may linger.
    drain_margin_seconds: float = Field(default=DRAIN_MARGIN_SECONDS, alias="drainMarginSeconds", ge=0)

    @field_validator("disruption_pending_seconds", "drain_margin_seconds", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value)


class Scenario(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str
    description: str = ""
    cluster_name: str = Field(default="demo", alias="clusterName")
    manifests: list[dict[str, Any]] = Field(default_factory=list)
    steps: list[Step] = Field(default_factory=list)
    # After the last step, keep running until everything settles, for at most this long.
    settle_seconds: float = Field(default=900.0, alias="settleSeconds")
    invariants: InvariantBounds = Field(default_factory=InvariantBounds)

    @field_validator("settle_seconds", mode="before")
    @classmethod
    def _settle(cls, value: Any) -> float:
        return parse_duration(value)


def _substitute(value: Any, variables: dict[str, str]) -> Any:
    if isinstance(value, str):
        for name, replacement in variables.items():
            value = value.replace("${" + name + "}", replacement)
        return value
    if isinstance(value, list):
        return [_substitute(v, variables) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, variables) for k, v in value.items()}
    return value


def builtin_names() -> list[str]:
    folder = package_resources.files("serverless_karpenter_sim") / "scenarios"
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_scenario(name_or_file: str) -> Scenario:
    """A built-in scenario by name, or a YAML file; validates every Karpenter manifest in it."""
    path = Path(name_or_file)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.exists():
            raise ScenarioError(f"scenario file {name_or_file}: not found")
        text = path.read_text()
        source = str(path)
    else:
        resource = package_resources.files("serverless_karpenter_sim") / "scenarios" / f"{name_or_file}.yaml"
        if not resource.is_file():
            raise ScenarioError(
                f"scenario {name_or_file!r}: no such built-in scenario "
                f"(have {', '.join(builtin_names())}) or file"
            )
        text = resource.read_text()
        source = f"built-in scenario {name_or_file!r}"
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ScenarioError(f"{source}: not valid YAML: {str(error).splitlines()[0]}") from error
    if not isinstance(raw, dict):
        raise ScenarioError(f"{source}: a scenario is a mapping with name, manifests and steps")
    try:
        scenario = Scenario.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ScenarioError(f"{source}: {where}: {first['msg']}") from error
    variables = {"CLUSTER_NAME": scenario.cluster_name}
    scenario.manifests = [_substitute(m, variables) for m in scenario.manifests]
    validate_manifests(scenario.manifests, source)
    for step in scenario.steps:
        if step.apply:
            step.apply = [_substitute(m, variables) for m in step.apply]
            validate_manifests(step.apply, source)
    return scenario


def validate_manifests(manifests: list[dict[str, Any]], source: str) -> None:
    for index, manifest in enumerate(manifests):
        if not isinstance(manifest, dict) or "kind" not in manifest or "apiVersion" not in manifest:
            raise ScenarioError(f"{source}: manifests[{index}]: needs apiVersion and kind")
        if is_karpenter_kind(manifest):
            try:
                parse_manifest(manifest)
            except ManifestError as error:
                raise ScenarioError(str(error)) from error
