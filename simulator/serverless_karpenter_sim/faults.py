"""Fault injection for the simulation: what a real AWS account or EKS control plane does to us.

A scenario's ``fault`` step names exactly one category, with options:

- ``{crash: NAME, times: N}``: arm a named crash point (``serverless_karpenter.crashpoints``).
- ``{ec2: KIND, ...}`` with KIND one of
  ``insufficient-capacity`` (``instance_types``, ``zones``, ``capacity_type``: those offerings have no
  capacity; CreateFleet falls back to the rest, or launches nothing), ``request-limit`` (RequestLimitExceeded
  on ``operation``, any by default), ``partial-fleet`` (the fleet launches but reports errors for other
  overrides), ``lost-response`` (CreateFleet launches an instance, then the call fails: the instance exists
  but the caller never learns its id), ``dies-pending`` (the launched instance is terminated right away).
- ``{dynamodb: KIND, operation: ...}`` with KIND ``conditional-check-failed`` (on conditional writes) or
  ``throttle`` (ProvisionedThroughputExceeded).
- ``{aws: {service, operation, error, status}}``: any canned AWS error.
- ``{kube: {verb, resource, status, ...}}``: a rule of the simulated API server's fault injector
  (5xx, 409, 429, ``timeout``, ``drop``), applied only to the control plane's requests.
- ``{lambda: crash, after: "service.Operation"}``: the Lambda dies right after that AWS call succeeded
  (a crash at any step that talks to AWS); ``{lambda: timeout, after_evictions: N}``: the Lambda is cut
  off after N evictions (a timeout mid-drain).
- ``{sqs: duplicate}`` / ``{sqs: reorder}``: the interruption queue delivers a message twice, or a
  batch out of order.

Every category takes ``times`` (default 1; ``null`` until cleared), ``skip`` (let that many matching
calls through first) and ``function`` (only inside invocations of that Lambda; any by default), and AWS
and Kubernetes categories take ``for`` (a duration after which the rule lapses).

Each armed fault keeps its own count of what it did (:meth:`FaultInjector.armed_faults`), so a scenario
can tell a fault that was armed from one that fired (:meth:`FaultInjector.unfired`). A Kubernetes
``timeout`` is held past the control plane's read timeout (``KUBERNETES_READ_TIMEOUT_SECONDS``) unless
the rule gives ``delay_seconds``: the real client gives up as it would on a stuck API server.

AWS faults are botocore event hooks on the control plane's clients: the decision is taken at
``before-parameter-build`` (where the request's parameters are visible), a canned answer is returned at
``before-call`` (so botocore's retry policy does not see it: the caller gets the error as if every retry
had failed), and ``after-call`` alters a real answer. Hooks act only while a Lambda is being invoked, so
the simulator's own calls (its kubelets, its SQS delivery) never see a fault meant for the control plane.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.awsrequest import AWSResponse
from botocore.client import BaseClient
from botocore.compat import HTTPHeaders
from serverless_karpenter import crashpoints

from serverless_karpenter_sim.scenario import parse_duration

if TYPE_CHECKING:
    from serverless_karpenter_sim.kubeapi.faults import FaultRule
    from serverless_karpenter_sim.simulation import Simulation

CATEGORIES = ("crash", "ec2", "dynamodb", "aws", "kube", "lambda", "sqs")
EC2_KINDS = ("insufficient-capacity", "request-limit", "partial-fleet", "lost-response", "dies-pending")
DYNAMODB_KINDS = ("conditional-check-failed", "throttle")
SQS_KINDS = ("duplicate", "reorder")
LAMBDA_KINDS = ("crash", "timeout")
_UNIQUE = "serverless-karpenter-sim-faults"
_CONTEXT_KEY = "serverless_karpenter_sim_fault"
_ICE = "InsufficientInstanceCapacity"
_AFTER_CALL_KINDS = ("partial-fleet", "lost-response", "dies-pending")
_CLIENT_HOLDERS = ("serverless_karpenter", "aws_lambda_powertools")
# How much longer than the client's read timeout a Kubernetes "timeout" holds the request: enough for
# the client's timer to fire first on a loaded machine.
TIMEOUT_MARGIN_SECONDS = 0.5


class FaultError(ValueError):
    """A fault step that cannot be understood; the message names what is wrong."""


@dataclass
class AwsRule:
    """One AWS fault: which calls it matches and what happens to them."""

    category: str
    kind: str
    service: str  # botocore's hyphenized service id: "ec2", "dynamodb"
    operation: str  # "CreateFleet", or "*"
    times: int | None
    skip: int = 0
    function: str | None = None
    until: float | None = None  # virtual seconds since the start
    error: str = ""
    status: int = 400
    instance_types: frozenset[str] | None = None
    zones: frozenset[str] | None = None
    capacity_type: str | None = None
    seen: int = 0
    injected: int = 0

    def live(self, elapsed: float) -> bool:
        if self.until is not None and elapsed >= self.until:
            return False
        return self.times is None or self.injected < self.times

    def describe(self) -> str:
        return f"{self.category} {self.kind} on {self.service}.{self.operation}"


@dataclass
class KubeRule:
    spec: dict[str, Any]
    times: int | None
    function: str | None
    until: float | None
    injected: int = 0
    active: FaultRule | None = None

    def live(self, elapsed: float) -> bool:
        if self.until is not None and elapsed >= self.until:
            return False
        return self.times is None or self.injected < self.times


@dataclass
class EvictionTimeout:
    function: str
    after_evictions: int
    times: int | None
    injected: int = 0
    evictions: int = 0


@dataclass
class SqsRule:
    kind: str
    times: int | None
    injected: int = 0


@dataclass
class CrashRule:
    """A named crash point armed ``times`` times; ``baseline`` is its global hit count when armed."""

    name: str
    times: int
    baseline: int
    injected: int = 0  # attributed by FaultInjector.armed_faults, from crashpoints.hits


Rule = AwsRule | KubeRule | EvictionTimeout | SqsRule | CrashRule


@dataclass
class ArmedFault:
    """One armed fault as a scenario step described it, and how often it took effect."""

    description: str
    injected: int


@dataclass
class SqsLedger:
    """Every interruption message the simulator received, and those it acknowledged (acted on)."""

    received: dict[str, str] = field(default_factory=dict)  # message id -> body
    acknowledged: set[str] = field(default_factory=set)
    receipts: dict[str, str] = field(default_factory=dict)  # receipt handle -> message id
    duplicates_sent: int = 0


def _error_response(code: str, status: int, message: str) -> tuple[AWSResponse, dict[str, Any]]:
    parsed = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status, "RetryAttempts": 0},
    }
    return AWSResponse("http://fault.invalid/", status, HTTPHeaders(), None), parsed


def _clients_in(value: Any, depth: int = 2) -> Iterator[BaseClient]:
    """botocore clients held by ``value`` or its attributes (adapters keep theirs as attributes)."""
    if isinstance(value, BaseClient):
        yield value
        return
    # Only our adapters and Powertools' persistence layer hold clients; anything else is not walked.
    owner = type(value).__module__
    if depth <= 0 or isinstance(value, type) or not owner.startswith(_CLIENT_HOLDERS):
        return
    try:
        attributes = vars(value)
    except Exception:  # objects without a __dict__, or whose attribute access raises
        return
    for attribute in list(attributes.values()):
        yield from _clients_in(attribute, depth - 1)


class FaultInjector:
    """Holds the armed faults of one simulation and applies them while its Lambdas run."""

    def __init__(self, sim: Simulation, seed: int = 0) -> None:
        self.sim = sim
        self.rng = random.Random(seed)
        self.aws_rules: list[AwsRule] = []
        self.kube_rules: list[KubeRule] = []
        self.eviction_timeouts: list[EvictionTimeout] = []
        self.sqs_rules: list[SqsRule] = []
        self.sqs = SqsLedger()
        self.injected: Counter[str] = Counter()  # category/kind -> faults that took effect
        self._history: list[tuple[str, Rule]] = []  # every armed fault in order, kept through clear()
        # crashpoints.hits is process-wide: only hits after this injector was made are this run's.
        self._crash_baseline = Counter(crashpoints.hits)
        self.function: str | None = None  # the Lambda being invoked, if any
        self._lock = threading.RLock()
        self._hooked: set[int] = set()
        self._sessions_hooked = False
        self._evict_wrapped = False

    # -- arming --------------------------------------------------------------------------------------

    @property
    def total_injected(self) -> int:
        """Every fault that took effect in this run, named crash points included."""
        return sum(self.by_kind().values())

    def taken_effect(self) -> int:
        """Every fault that took effect so far, those of a Kubernetes rule still installed included."""
        with self._lock:
            active = sum(rule.active.injected for rule in self.kube_rules if rule.active is not None)
        return self.total_injected + active

    def by_kind(self) -> Counter[str]:
        """Faults that took effect by ``category/kind``, with each named crash point as ``crash/NAME``."""
        out = Counter(self.injected)
        for name, hits in (crashpoints.hits - self._crash_baseline).items():
            out[f"crash/{name}"] += hits
        return out

    def armed_faults(self) -> list[ArmedFault]:
        """Every fault armed so far, in order, with how often each took effect."""
        self._attribute_crash_hits()
        return [ArmedFault(description, rule.injected) for description, rule in self._history]

    def unfired(self) -> list[str]:
        """Armed faults that never took effect: a scenario that claims to test them does not."""
        return [fault.description for fault in self.armed_faults() if fault.injected == 0]

    def _attribute_crash_hits(self) -> None:
        # Armed counts of one crash point add up, and hits consume them in arming order: attribute the hits
        # since each arming to the armings first in, first out.
        cursor: dict[str, int] = {}
        for _, rule in self._history:
            if not isinstance(rule, CrashRule):
                continue
            start = max(rule.baseline, cursor.get(rule.name, 0))
            rule.injected = min(rule.times, max(0, crashpoints.hits[rule.name] - start))
            cursor[rule.name] = start + rule.injected

    def arm(self, spec: dict[str, Any]) -> str:
        """Arm the fault a scenario step describes; returns a one-line description for the timeline."""
        description, rule = self._arm(spec)
        if spec.get("function"):
            description += f" in {spec['function']}"
        self._history.append((f"#{len(self._history) + 1} {description}", rule))
        return description

    def _arm(self, spec: dict[str, Any]) -> tuple[str, Rule]:
        present = [c for c in CATEGORIES if c in spec]
        if len(present) != 1:
            raise FaultError(f"fault {spec!r}: needs exactly one of {', '.join(CATEGORIES)}")
        category = present[0]
        times = spec.get("times", 1)
        times = None if times is None else int(times)
        function = spec.get("function")
        until = self.sim.elapsed + parse_duration(spec["for"]) if "for" in spec else None
        skip = int(spec.get("skip", 0))
        kind = spec[category]
        if category == "crash":
            crash = CrashRule(str(kind), times or 1, crashpoints.hits[str(kind)])
            crashpoints.arm(crash.name, crash.times)
            return f"crash at {kind}", crash
        if category == "ec2":
            return self._arm_ec2(str(kind), spec, times, skip, function, until)
        if category == "dynamodb":
            if kind not in DYNAMODB_KINDS:
                raise FaultError(f"fault dynamodb: {kind!r} is not one of {', '.join(DYNAMODB_KINDS)}")
            conditional = kind == "conditional-check-failed"
            rule = AwsRule(
                category="dynamodb",
                kind=str(kind),
                service="dynamodb",
                operation=str(spec.get("operation", "*")),
                times=times,
                skip=skip,
                function=function,
                until=until,
                error="ConditionalCheckFailedException"
                if conditional
                else "ProvisionedThroughputExceededException",
                status=400,
            )
            return self._add_aws(rule)
        if category == "aws":
            if not isinstance(kind, dict) or not {"service", "error"} <= kind.keys():
                raise FaultError(f"fault aws: {kind!r} needs service and error")
            rule = AwsRule(
                category="aws",
                kind=str(kind["error"]),
                service=str(kind["service"]),
                operation=str(kind.get("operation", "*")),
                times=times,
                skip=skip,
                function=function,
                until=until,
                error=str(kind["error"]),
                status=int(kind.get("status", 400)),
            )
            return self._add_aws(rule)
        if category == "kube":
            if not isinstance(kind, dict):
                raise FaultError(f"fault kube: {kind!r} is not a mapping of verb, resource, status")
            probe = dict(kind)
            probe.pop("times", None)
            if probe.get("status") == "timeout" and "delay_seconds" not in probe:
                read_timeout = self.sim.settings.kubernetes_read_timeout_seconds
                probe["delay_seconds"] = read_timeout + TIMEOUT_MARGIN_SECONDS
            self.sim.kube_server.faults.add(**probe, times=0)  # validates the rule; never fires
            kube_rule = KubeRule(probe, times, function, until)
            self.kube_rules.append(kube_rule)
            verb, resource = probe.get("verb", "*"), probe.get("resource", "*")
            return f"kube {probe.get('status', 500)} on {verb} {resource}", kube_rule
        if category == "lambda":
            return self._arm_lambda(str(kind), spec, times, skip, function, until)
        if kind not in SQS_KINDS:
            raise FaultError(f"fault sqs: {kind!r} is not one of {', '.join(SQS_KINDS)}")
        self._hook_simulator_sqs()
        sqs_rule = SqsRule(str(kind), times)
        self.sqs_rules.append(sqs_rule)
        return f"sqs {kind}", sqs_rule

    def _arm_ec2(
        self,
        kind: str,
        spec: dict[str, Any],
        times: int | None,
        skip: int,
        function: str | None,
        until: float | None,
    ) -> tuple[str, Rule]:
        if kind not in EC2_KINDS:
            raise FaultError(f"fault ec2: {kind!r} is not one of {', '.join(EC2_KINDS)}")
        operation = str(spec.get("operation", "*" if kind == "request-limit" else "CreateFleet"))
        if kind == "insufficient-capacity":
            rule = AwsRule(
                category="ec2",
                kind=kind,
                service="ec2",
                operation="CreateFleet",
                times=times,
                skip=skip,
                function=function,
                until=until,
                error=_ICE,
                instance_types=frozenset(spec["instance_types"]) if "instance_types" in spec else None,
                zones=frozenset(spec["zones"]) if "zones" in spec else None,
                capacity_type=spec.get("capacity_type"),
            )
        else:
            rule = AwsRule(
                category="ec2",
                kind=kind,
                service="ec2",
                operation=operation,
                times=times,
                skip=skip,
                function=function,
                until=until,
                error="RequestLimitExceeded" if kind == "request-limit" else "InternalError",
                status=503 if kind == "request-limit" else 500,
            )
        return self._add_aws(rule)

    def _arm_lambda(
        self,
        kind: str,
        spec: dict[str, Any],
        times: int | None,
        skip: int,
        function: str | None,
        until: float | None,
    ) -> tuple[str, Rule]:
        if kind not in LAMBDA_KINDS:
            raise FaultError(f"fault lambda: {kind!r} is not one of {', '.join(LAMBDA_KINDS)}")
        if kind == "timeout":
            after = int(spec.get("after_evictions", 1))
            timeout = EvictionTimeout(function or "termination", after, times)
            self.eviction_timeouts.append(timeout)
            self._wrap_evict()
            return f"lambda {timeout.function} times out after {after} eviction(s)", timeout
        after_call = str(spec.get("after", ""))
        service, _, operation = after_call.partition(".")
        if not service or not operation:
            raise FaultError(f"fault lambda crash: after {after_call!r} is not service.Operation")
        rule = AwsRule(
            category="lambda",
            kind="crash",
            service=service,
            operation=operation,
            times=times,
            skip=skip,
            function=function,
            until=until,
        )
        return self._add_aws(rule)

    def _add_aws(self, rule: AwsRule) -> tuple[str, Rule]:
        with self._lock:
            self.aws_rules.append(rule)
        self._hook_sessions()
        return rule.describe(), rule

    def clear(self) -> None:
        with self._lock:
            self.aws_rules.clear()
            self.kube_rules.clear()
            self.eviction_timeouts.clear()
            self.sqs_rules.clear()
        crashpoints.disarm_all()

    # -- the scope of one Lambda invocation ----------------------------------------------------------

    @contextmanager
    def invocation(self, function: str) -> Iterator[None]:
        """While ``function`` runs: its AWS clients are hooked and its Kubernetes faults installed.

        Invocations nest (the watcher invokes the provisioner in-process): the inner one sees its own
        name, and a Kubernetes rule already installed by the outer one is not installed twice.
        """
        outer = self.function
        self.function = function
        if self.aws_rules:
            self.sim.lambdas.handler(function)  # loaded first, so that clients made at import are hooked
            self._hook_clients()
        installed = self._install_kube_rules(function)
        try:
            yield
        finally:
            self._harvest_kube_rules(installed)
            self.function = outer

    def _install_kube_rules(self, function: str) -> list[tuple[KubeRule, FaultRule]]:
        installed = []
        elapsed = self.sim.elapsed
        for rule in self.kube_rules:
            if rule.active is not None or rule.function not in (None, function) or not rule.live(elapsed):
                continue
            remaining = None if rule.times is None else rule.times - rule.injected
            rule.active = self.sim.kube_server.faults.add(**rule.spec, times=remaining)
            installed.append((rule, rule.active))
        return installed

    def _harvest_kube_rules(self, installed: list[tuple[KubeRule, FaultRule]]) -> None:
        for rule, active in installed:
            # Spent: the API server skips an exhausted rule, so the simulator's own requests never see it.
            active.times = active.injected
            rule.injected += active.injected
            if active.injected:
                self.injected[f"kube/{rule.spec.get('status', 500)}"] += active.injected
            rule.active = None

    # -- AWS hooks -----------------------------------------------------------------------------------

    def _hook_sessions(self) -> None:
        """Hook the cached boto3 sessions, so clients created from now on (a lease's) carry the hooks."""
        if self._sessions_hooked:
            return
        from serverless_karpenter.adapters import aws

        session = aws._session(self.sim.cloud.region)
        self._register(session.events)
        self._sessions_hooked = True

    def _hook_clients(self) -> None:
        """Hook the clients the control plane and the handler modules already hold."""
        from serverless_karpenter.adapters import aws

        holders: list[Any] = self._planes()
        for module in self.sim.lambdas.handlers.values():
            holders.extend(vars(module).values())
        holders.extend(aws.cached_clients())
        for holder in holders:
            for client in _clients_in(holder):
                if id(client) not in self._hooked:
                    self._hooked.add(id(client))
                    self._register(client.meta.events)

    def _register(self, events: Any) -> None:
        events.register("before-parameter-build", self._decide, unique_id=f"{_UNIQUE}-decide")
        events.register("before-call", self._answer, unique_id=f"{_UNIQUE}-answer")
        events.register("after-call", self._alter, unique_id=f"{_UNIQUE}-alter")

    def _decide(self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        if self.function is None:
            return
        service = model.service_model.service_id.hyphenize()
        operation = model.name
        elapsed = self.sim.elapsed
        with self._lock:
            primary: AwsRule | None = None
            for rule in self.aws_rules:
                if rule.function not in (None, self.function) or not rule.live(elapsed):
                    continue
                if rule.service != service or rule.operation not in ("*", operation):
                    continue
                if rule.kind == "conditional-check-failed" and "ConditionExpression" not in params:
                    continue
                if rule.kind == "insufficient-capacity":
                    # Offerings without capacity combine with any other fault on the same call.
                    if self._strip_unavailable(rule, params, context):
                        rule.injected += 1
                        self.injected[f"{rule.category}/{rule.kind}"] += 1
                    continue
                if primary is not None:
                    continue
                rule.seen += 1
                if rule.seen <= rule.skip:
                    continue
                rule.injected += 1
                self.injected[f"{rule.category}/{rule.kind}"] += 1
                primary = context[_CONTEXT_KEY] = rule

    def _strip_unavailable(self, rule: AwsRule, params: dict[str, Any], context: dict[str, Any]) -> bool:
        """Take the offerings without capacity out of the fleet request; remember them for the answer."""
        capacity = (params.get("TargetCapacitySpecification") or {}).get("DefaultTargetCapacityType", "")
        if rule.capacity_type is not None and rule.capacity_type != capacity:
            return False
        removed: list[dict[str, Any]] = []
        for config in params.get("LaunchTemplateConfigs") or []:
            kept = []
            for override in config.get("Overrides") or []:
                type_hit = rule.instance_types is None or override.get("InstanceType") in rule.instance_types
                zone_hit = rule.zones is None or override.get("AvailabilityZone") in rule.zones
                hit = type_hit and zone_hit
                if hit:
                    removed.append({"config": config, "override": override, "capacity": capacity})
                else:
                    kept.append(override)
            config["Overrides"] = kept
        if not removed:
            return False
        remaining = [c for c in params.get("LaunchTemplateConfigs") or [] if c.get("Overrides")]
        context.setdefault(f"{_CONTEXT_KEY}_ice", []).extend(removed)
        if remaining:
            params["LaunchTemplateConfigs"] = remaining
        else:
            # Nothing launchable is left: the answer is canned (restore the request for the record).
            for item in removed:
                item["config"].setdefault("Overrides", []).append(item["override"])
            context[f"{_CONTEXT_KEY}_nothing"] = True
        return True

    def _answer(self, context: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        rule: AwsRule | None = context.get(_CONTEXT_KEY)
        if rule is not None and rule.category != "lambda" and rule.kind not in _AFTER_CALL_KINDS:
            return _error_response(rule.error, rule.status, f"injected by the simulator: {rule.describe()}")
        if context.get(f"{_CONTEXT_KEY}_nothing"):
            parsed = {"Instances": [], "Errors": [], "ResponseMetadata": {"HTTPStatusCode": 200}}
            return AWSResponse("http://fault.invalid/", 200, HTTPHeaders(), None), parsed
        return None  # the call goes through; after-call does any damage

    def _alter(self, http_response: Any, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        for item in context.get(f"{_CONTEXT_KEY}_ice") or []:
            parsed.setdefault("Errors", []).append(
                {
                    "LaunchTemplateAndOverrides": {
                        "LaunchTemplateSpecification": item["config"].get("LaunchTemplateSpecification"),
                        "Overrides": item["override"],
                    },
                    "Lifecycle": item["capacity"],
                    "ErrorCode": _ICE,
                    "ErrorMessage": "We currently do not have sufficient capacity (injected)",
                }
            )
        rule: AwsRule | None = context.get(_CONTEXT_KEY)
        if rule is None:
            return
        instance_ids = [i for item in parsed.get("Instances") or [] for i in item.get("InstanceIds") or []]
        if rule.kind == "partial-fleet":
            parsed.setdefault("Errors", []).append(
                {"ErrorCode": _ICE, "ErrorMessage": "partial fleet (injected)", "Lifecycle": "on-demand"}
            )
        elif rule.kind == "lost-response":
            http_response.status_code = 500
            parsed["Error"] = {"Code": "InternalError", "Message": "the response was lost (injected)"}
        elif rule.kind == "dies-pending" and instance_ids:
            # A plain client: the simulator's own, which carries no hooks.
            self.sim.ec2.terminate_instances(InstanceIds=instance_ids)
        elif rule.category == "lambda":
            raise crashpoints.InjectedCrash(f"after {rule.service}.{rule.operation}")

    # -- Lambda timeouts mid-drain -------------------------------------------------------------------

    def _planes(self) -> list[Any]:
        """The control plane the functions run with (one, signing as whichever function is running)."""
        return [self.sim.plane]

    def _wrap_evict(self) -> None:
        if self._evict_wrapped:
            return
        for plane in self._planes():
            self._wrap_plane_evict(plane.kube)
        self._evict_wrapped = True

    def _wrap_plane_evict(self, kube: Any) -> None:
        original = kube.evict

        def evict(pod: Any) -> str:
            outcome = original(pod)
            for timeout in self.eviction_timeouts:
                if self.function != timeout.function:
                    continue
                if timeout.times is not None and timeout.injected >= timeout.times:
                    continue
                timeout.evictions += 1
                if timeout.evictions >= timeout.after_evictions:
                    timeout.evictions = 0
                    timeout.injected += 1
                    self.injected["lambda/timeout"] += 1
                    raise crashpoints.InjectedCrash(f"{self.function} timed out mid-drain")
            return outcome

        vars(kube)["evict"] = evict  # an instance attribute shadows the method for this plane only

    # -- SQS delivery --------------------------------------------------------------------------------

    def _hook_simulator_sqs(self) -> None:
        events = self.sim.sqs.meta.events
        events.register("after-call.sqs.ReceiveMessage", self._received, unique_id=f"{_UNIQUE}-sqs-faults")

    def hook_ledger(self) -> None:
        """Record what the simulator receives from, and acknowledges to, the interruption queue."""
        events = self.sim.sqs.meta.events
        events.register("before-parameter-build.sqs", self._queue_of, unique_id=f"{_UNIQUE}-sqs-queue")
        events.register("after-call.sqs.ReceiveMessage", self._ledger_receive, unique_id=f"{_UNIQUE}-sqs-in")
        events.register("after-call.sqs.DeleteMessage", self._ledger_delete, unique_id=f"{_UNIQUE}-sqs-ack")

    def _queue_of(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context[f"{_CONTEXT_KEY}_queue"] = params.get("QueueUrl")
        context[f"{_CONTEXT_KEY}_receipt"] = params.get("ReceiptHandle")

    def _is_interruption_queue(self, context: dict[str, Any]) -> bool:
        resources = self.sim.resources
        return resources is not None and context.get(f"{_CONTEXT_KEY}_queue") == resources.queue_url

    def _ledger_receive(self, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        if not self._is_interruption_queue(context):
            return
        for message in parsed.get("Messages") or []:
            self.sqs.received[message["MessageId"]] = message.get("Body", "")
            self.sqs.receipts[message["ReceiptHandle"]] = message["MessageId"]

    def _ledger_delete(self, http_response: Any, context: dict[str, Any], **_: Any) -> None:
        if not self._is_interruption_queue(context) or http_response.status_code >= 300:
            return
        message_id = self.sqs.receipts.get(context.get(f"{_CONTEXT_KEY}_receipt") or "")
        if message_id:
            self.sqs.acknowledged.add(message_id)

    def _received(self, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        if not self._is_interruption_queue(context):
            return
        messages = parsed.get("Messages") or []
        if not messages:
            return
        for rule in self.sqs_rules:
            if rule.times is not None and rule.injected >= rule.times:
                continue
            if rule.kind == "reorder" and len(messages) > 1:
                original = [m["MessageId"] for m in messages]
                while [m["MessageId"] for m in messages] == original:
                    self.rng.shuffle(messages)
                rule.injected += 1
                self.injected["sqs/reorder"] += 1
            elif rule.kind == "duplicate":
                # At-least-once delivery: the same event arrives again as another message.
                assert self.sim.resources is not None
                for message in messages:
                    queue = self.sim.resources.queue_url
                    self.sim.sqs.send_message(QueueUrl=queue, MessageBody=message["Body"])
                    self.sqs.duplicates_sent += 1
                rule.injected += 1
                self.injected["sqs/duplicate"] += 1
        parsed["Messages"] = messages
