"""Runs our Lambda handlers in-process, as the Lambda service would, with what CDK gives them."""

from __future__ import annotations

import contextlib
import datetime
import importlib
import importlib.util
import io
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Self, TextIO

from serverless_karpenter.clock import Clock
from serverless_karpenter.deployment import FUNCTION_TIMEOUT_SECONDS

from serverless_karpenter_sim.lambda_credentials import FunctionCredentials
from serverless_karpenter_sim.lambda_failures import EXCEPTION, LambdaFailure, ScanningLog, classify

# Powertools' idempotency modules, which read the time as ``dt.datetime.now()`` (``import datetime as
# dt``): when an INPROGRESS record expires, and when a record's idempotency window ends.
POWERTOOLS_TIME_READERS = (
    "aws_lambda_powertools.utilities.idempotency.base",
    "aws_lambda_powertools.utilities.idempotency.persistence.base",
    "aws_lambda_powertools.utilities.idempotency.persistence.dynamodb",
    "aws_lambda_powertools.utilities.idempotency.persistence.datarecord",
)


def functions_dir() -> Path:
    """``functions/`` of the checkout this package runs from."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / "functions"
        if (candidate / "provisioner" / "handler.py").is_file():
            return candidate
    raise FileNotFoundError(
        "functions/ not found beside the simulator; run from a checkout of serverless-karpenter"
    )


@dataclass
class LambdaContext:
    """The parts of the Lambda context object our handlers and Powertools read.

    The invocation's deadline is on ``clock`` (the simulation's virtual time), as Lambda's is on real time.
    """

    function_name: str
    clock: Clock
    timeout_seconds: int
    memory_limit_in_mb: int = 1024
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    started_at: datetime.datetime = field(init=False)

    def __post_init__(self) -> None:
        self.started_at = self.clock.now()

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}"

    @property
    def function_version(self) -> str:
        return "$LATEST"

    @property
    def log_group_name(self) -> str:
        return f"/aws/lambda/{self.function_name}"

    @property
    def log_stream_name(self) -> str:
        return "local"

    def get_remaining_time_in_millis(self) -> int:
        elapsed = (self.clock.now() - self.started_at).total_seconds()
        return max(0, int((self.timeout_seconds - elapsed) * 1000))


def load_handler(name: str) -> ModuleType:
    """A fresh copy of the handler module: a new simulation is a new Lambda, with no warm state."""
    path = functions_dir() / name / "handler.py"
    module_name = f"serverless_karpenter_function_{name}_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class InProcessInvoker:
    """Invokes function ``name`` in this process (``invoke``: the simulation's, which reports a failed
    invocation as the Lambda service would): the control plane's ``ProvisionerInvoker`` in a simulation,
    where Lambda would run an asynchronous invocation."""

    invoke_function: Callable[[str, dict[str, Any]], Any]
    name: str

    def invoke(self, payload: Mapping[str, object]) -> None:
        self.invoke_function(self.name, dict(payload))


class _DatetimeModule(ModuleType):
    """A stand-in for the ``datetime`` module (its attributes copied in), with its ``datetime`` class."""

    datetime: type[datetime.datetime]


def virtual_datetime_module(clock: Clock) -> ModuleType:
    """The ``datetime`` module, but with ``datetime.now()`` on ``clock``."""

    class VirtualDatetime(datetime.datetime):
        @classmethod
        def now(cls, tz: datetime.tzinfo | None = None) -> Self:
            # As datetime.now(): naive local time without ``tz``.
            return cls.fromtimestamp(clock.now().timestamp(), tz)

    module = _DatetimeModule("datetime", datetime.__doc__)
    vars(module).update({k: v for k, v in vars(datetime).items() if not k.startswith("__")})
    module.datetime = VirtualDatetime
    return module


@contextlib.contextmanager
def powertools_on(clock_module: ModuleType) -> Iterator[None]:
    """Powertools' idempotency layer reads the time from ``clock_module`` while inside.

    Powertools judges an INPROGRESS record expired once the crashed invocation's remaining time has passed
    on the wall clock; its config takes no clock (3.x: ``IdempotencyConfig`` and the persistence layers
    have no clock parameter, and ``DataRecord.is_expired`` reads ``dt.datetime.now()`` itself), so
    rebinding the module's ``dt`` is the only way in for a module we do not own. On virtual time the
    redelivery of a crashed invocation's message comes a visibility timeout later in virtual seconds but
    mere milliseconds later on the wall, so on the wall clock every redelivery would be refused as
    "already in progress" until the redrive policy dropped the message. Rebinding the ``dt`` name of just
    those modules, only while a handler runs, puts that judgement on the simulation's clock without
    touching the handler or the time of anything else.
    """
    saved: list[tuple[ModuleType, ModuleType]] = []
    for name in POWERTOOLS_TIME_READERS:
        module = importlib.import_module(name)
        current = vars(module).get("dt")
        if not isinstance(current, ModuleType) or current.__name__ != "datetime":
            # Powertools changed how it reads the time: fail rather than silently judge on the wall clock.
            raise RuntimeError(f"{name} no longer reads the time as dt.datetime.now(); update {__name__}")
        saved.append((module, current))
    try:
        for module, _ in saved:
            vars(module)["dt"] = clock_module
        yield
    finally:
        for module, current in saved:
            vars(module)["dt"] = current


class LambdaRuntime:
    """Invokes handlers by name on ``clock``; their stdout (JSON logs and EMF metrics) goes to ``log``.

    Every failure of an invocation, raised or logged (``lambda_failures``), is kept in ``failures``.
    ``faults_taken_effect`` counts the injected faults that took effect so far: an exception raised by an
    invocation during which that count grew is marked as the fault's consequence.
    """

    def __init__(
        self,
        cluster_name: str,
        clock: Clock,
        log: TextIO | None = None,
        faults_taken_effect: Callable[[], int] | None = None,
    ) -> None:
        self.cluster_name = cluster_name
        # Each function's role credentials (set once the stack's roles exist); None: the environment's.
        self.credentials: FunctionCredentials | None = None
        self.clock = clock
        self.log: TextIO = log or io.StringIO()
        self.handlers: dict[str, ModuleType] = {}
        self.invocations: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        self.failures: list[LambdaFailure] = []
        self._faults_taken_effect = faults_taken_effect or (lambda: 0)
        self._started = clock.now()
        self._virtual_datetime = virtual_datetime_module(clock)

    @staticmethod
    def timeout_seconds(name: str) -> int:
        """The function's timeout as the stack deploys it."""
        return FUNCTION_TIMEOUT_SECONDS[name]

    def handler(self, name: str) -> ModuleType:
        if name not in self.handlers:
            self.handlers[name] = load_handler(name)
        return self.handlers[name]

    def unload(self) -> None:
        """Take this runtime's handler modules out of ``sys.modules`` (each simulation loads its own
        copies under fresh names): left there, every module, and through its globals the whole simulation
        it served, would stay alive for the rest of the process (~45 MB a simulation in the test suite)."""
        for module in self.handlers.values():
            if sys.modules.get(module.__name__) is module:
                del sys.modules[module.__name__]

    def invoke(self, name: str, event: dict[str, Any]) -> Any:
        module = self.handler(name)
        context = LambdaContext(
            function_name=f"{self.cluster_name}-{name}",
            clock=self.clock,
            timeout_seconds=self.timeout_seconds(name),
        )
        self.invocations[name] = self.invocations.get(name, 0) + 1
        reported: set[str] = set()  # one failure of each kind per invocation

        def fail(kind: str, detail: str, *, logged: bool, caused_by_fault: bool = False) -> None:
            if kind in reported:
                return
            reported.add(kind)
            at = (self.clock.now() - self._started).total_seconds()
            self.failures.append(
                LambdaFailure(name, context.aws_request_id, at, kind, detail, logged, caused_by_fault)
            )

        stdout = ScanningLog(self.log, lambda kind, detail: fail(kind, detail, logged=True))
        faults_before = self._faults_taken_effect()
        acting = self.credentials.acting_as(name) if self.credentials else contextlib.nullcontext()
        with contextlib.redirect_stdout(stdout), powertools_on(self._virtual_datetime), acting:
            try:
                return module.lambda_handler(event, context)
            except Exception as error:
                self.errors[name] = self.errors.get(name, 0) + 1
                kind, detail = classify(error)
                injected = kind == EXCEPTION and self._faults_taken_effect() > faults_before
                fail(kind, detail, logged=False, caused_by_fault=injected)
                raise
