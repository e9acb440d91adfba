"""``python -m benchmarks idle-cost --json``: what an idle cluster's control plane costs a month.

Two sources, priced from ``benchmarks/prices_us_east_1.json`` (us-east-1 list prices, dated, with sources):

- **An idle hour in the simulator** (``--minutes``, 60 by default): the ``default`` scenario's NodePool and
  EC2NodeClass with no workload, the real handlers on moto and the simulated API server. Measured per
  function: invocations, the wall time of each, the log bytes it writes, the AWS API calls it makes, and
  every metric stream its EMF lines publish (namespace, name and dimension set with values).
- **The synthesized template** (one cluster, the stack's defaults): each function's memory, architecture
  and tracing mode, the SQS event sources (their idle pollers), the alarms (priced per metric they read),
  dashboards and customer-managed KMS keys.

How a simulated invocation becomes a billed Lambda invocation. The simulator runs invocations in zero
virtual time on a virtual clock, so what blocks or sleeps is taken from the virtual clock and what
computes from the wall clock:

- *watcher*: one invocation a minute (its schedule); billed for its watch, from its LIST to the end of the
  watch (virtual seconds: the simulator runs one invocation in turns of a virtual second), plus the wall
  time of its turns;
- *disruption*: one invocation a minute; the simulator runs its passes one at a time (``loopSeconds: 0``),
  an AWS invocation runs the minute's passes in one loop that sleeps between them, so it is billed for the
  virtual time from its first pass to its last plus their wall time;
- *provisioner* and *termination*: one pass a minute (their schedules; the simulator runs termination
  every 5 s to stand in for the delayed messages of drains, of which an idle cluster has none), billed the
  mean wall time of a pass. In-process moto and API server answer in well under AWS's tens of milliseconds
  a call, so this part is a floor; ``api_calls`` says how many calls a pass makes.

Billed duration is rounded up to the millisecond per invocation (Lambda's granularity); cold starts (whose
INIT phase Lambda also bills) are left out: a function invoked every minute keeps its environment for hours.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PRICES_FILE = Path(__file__).with_name("prices_us_east_1.json")
HOURS_PER_MONTH = 730  # AWS's pricing pages price a month as 730 hours
MINUTES_PER_MONTH = HOURS_PER_MONTH * 60
WARM_UP_SECONDS = 30.0
WORKLOAD_WARM_UP_SECONDS = 600.0
CLUSTER = "idle"
# Each Lambda invocation also writes START, END and REPORT lines to its log group (~350 bytes).
PLATFORM_LOG_BYTES = 350
DYNAMODB_WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"})


def load_prices(path: Path = PRICES_FILE) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


# -- the simulated idle hour ---------------------------------------------------------------------------


@dataclass
class FunctionRun:
    """What one function did in the simulated period."""

    passes: int = 0
    wall_seconds: float = 0.0
    log_bytes: int = 0
    api_calls: Counter[str] = field(default_factory=Counter)
    # The AWS invocations the passes amount to, and their billed seconds (see the module's docstring).
    invocations: int = 0
    billed_seconds: float = 0.0


@dataclass
class SimulatedPeriod:
    minutes: float
    wall_seconds: float
    functions: dict[str, FunctionRun]
    metric_streams: list[dict[str, Any]]
    kube_requests: dict[str, int]
    lambda_failures: int


def metric_streams(log_text: str) -> set[tuple[str, str, tuple[tuple[str, str], ...]]]:
    """Every (namespace, metric name, dimensions with values) the EMF lines of ``log_text`` publish: each
    is one CloudWatch custom metric."""
    streams: set[tuple[str, str, tuple[tuple[str, str], ...]]] = set()
    for line in log_text.splitlines():
        if '"_aws"' not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict) or not isinstance(record.get("_aws"), dict):
            continue
        for directive in record["_aws"].get("CloudWatchMetrics", []):
            for dimension_set in directive.get("Dimensions", []) or [[]]:
                dims = tuple(sorted((d, str(record.get(d, ""))) for d in dimension_set))
                for metric in directive.get("Metrics", []):
                    streams.add((directive["Namespace"], metric["Name"], dims))
    return streams


def idle_scenario(replicas: int) -> Any:
    """The ``default`` scenario's NodePool and EC2NodeClass, and its Deployment at ``replicas`` (none: no
    Deployment, so no node)."""
    from benchmarks.watcher_requests import idle_scenario as nodepool_only

    scenario = nodepool_only()
    if not replicas:
        return scenario
    from serverless_karpenter_sim.scenario import load_scenario

    (deployment,) = [m for m in load_scenario("default").manifests if m["kind"] == "Deployment"]
    deployment = {**deployment, "spec": {**deployment["spec"], "replicas": replicas}}
    return scenario.model_copy(update={"manifests": [*scenario.manifests, deployment]})


def simulate(minutes: float, replicas: int = 0) -> SimulatedPeriod:
    from serverless_karpenter.adapters import aws
    from serverless_karpenter.naming import FUNCTION_NAMES
    from serverless_karpenter_sim.simulation import Simulation

    log = io.StringIO()
    sim = Simulation(idle_scenario(replicas), log=log)
    sim.start()
    try:
        # With a workload: its nodes launched, registered and consolidated before the period begins.
        sim.run_for(WARM_UP_SECONDS if not replicas else WORKLOAD_WARM_UP_SECONDS)
        runs = {name: FunctionRun() for name in FUNCTION_NAMES}
        current: list[str] = []
        # (virtual seconds since the start, wall seconds) of each pass, by function.
        passes: dict[str, list[tuple[float, float]]] = defaultdict(list)
        # Keyed by the watch object itself, which the key keeps alive: an id() is reused once its object is
        # freed, and two invocations' watches would then bill as one.
        sessions: dict[object, list[tuple[float, float]]] = defaultdict(list)
        started_at = sim.clock.now()

        def count_call(model: Any, **_: Any) -> None:
            if current:
                runs[current[-1]].api_calls[f"{model.service_model.service_name}:{model.name}"] += 1

        hooked: set[int] = set()

        def hook_clients() -> None:
            for client in aws.cached_clients():
                if id(client) not in hooked:
                    hooked.add(id(client))
                    client.meta.events.register("before-call", count_call, unique_id="idle-cost-count")

        aws.shared_session(sim.cloud.region).events.register(
            "before-call", count_call, unique_id="idle-cost-count"
        )
        hook_clients()
        invoke = sim.lambdas.invoke

        def measured_invoke(name: str, event: dict[str, Any]) -> Any:
            hook_clients()
            at = (sim.clock.now() - started_at).total_seconds()
            log_before = log.tell()
            current.append(name)
            wall = time.perf_counter()
            try:
                return invoke(name, event)
            finally:
                wall = time.perf_counter() - wall
                current.pop()
                run = runs[name]
                run.passes += 1
                run.wall_seconds += wall
                run.log_bytes += log.tell() - log_before
                passes[name].append((at, wall))
                if name == "watcher":
                    session = getattr(sim.lambdas.handler("watcher"), "_session", None)
                    sessions[session].append((at, wall))

        sim.lambdas.invoke = measured_invoke
        audit = sim.kube_server.audit
        before = {name: audit.requests_of(sim.function_user(name)) for name in FUNCTION_NAMES}
        started = time.perf_counter()
        sim.run_for(minutes * 60)
        wall_total = time.perf_counter() - started
        sim.lambdas.invoke = invoke

        kube = {
            name: sum((audit.requests_of(sim.function_user(name)) - before[name]).values())
            for name in FUNCTION_NAMES
        }
        # The metric streams of the measured period only: what an idle cluster publishes all month.
        period_log = log.getvalue()
        _bill_invocations(runs, passes, sessions, minutes)
        streams = [
            {"namespace": ns, "metric": name, "dimensions": dict(dims)}
            for ns, name, dims in sorted(metric_streams(period_log[_warm_up_offset(runs, log) :]))
        ]
        return SimulatedPeriod(
            minutes=minutes,
            wall_seconds=wall_total,
            functions=runs,
            metric_streams=streams,
            kube_requests=kube,
            lambda_failures=len(sim.lambdas.failures),
        )
    finally:
        sim.stop()


def _warm_up_offset(runs: Mapping[str, FunctionRun], log: io.StringIO) -> int:
    """Where the measured period's log begins: its bytes are the last ones written."""
    return len(log.getvalue()) - sum(run.log_bytes for run in runs.values())


def _bill_invocations(
    runs: dict[str, FunctionRun],
    passes: Mapping[str, list[tuple[float, float]]],
    sessions: Mapping[object, list[tuple[float, float]]],
    minutes: float,
) -> None:
    """Turn the simulator's passes into AWS invocations and billed seconds (see the module's docstring)."""
    scheduled = max(1, round(minutes))  # one scheduled invocation a minute
    for name, run in runs.items():
        if not run.passes:
            continue
        if name == "watcher":
            # Each watch session is one invocation: from its LIST to its last turn, a virtual second each.
            # The period cuts the first and last sessions short: whole ones only, when there are any.
            whole = list(sessions.values())[1:-1] or list(sessions.values())
            spans = [(turns[-1][0] - turns[0][0] + 1.0) + sum(w for _, w in turns) for turns in whole]
            run.invocations = scheduled
            run.billed_seconds = scheduled * (sum(spans) / len(spans))
        elif name == "disruption":
            by_minute: dict[int, list[tuple[float, float]]] = defaultdict(list)
            for at, wall in passes[name]:
                by_minute[int(at // 60)].append((at, wall))
            billed = [(p[-1][0] - p[0][0]) + sum(w for _, w in p) for p in by_minute.values()]
            run.invocations = scheduled
            run.billed_seconds = scheduled * (sum(billed) / len(billed))
        elif name in ("provisioner", "termination"):
            run.invocations = scheduled
            run.billed_seconds = scheduled * run.wall_seconds / run.passes
        else:  # interruption: only when messages arrive
            run.invocations = run.passes
            run.billed_seconds = run.wall_seconds


# -- the template -------------------------------------------------------------------------------------


@dataclass
class TemplateFacts:
    functions: dict[str, dict[str, Any]]  # name -> memory_mb, architecture, tracing
    event_sources: int
    alarms: list[dict[str, Any]]  # name, metrics
    dashboards: int
    kms_keys: int
    scheduled_queue_messages_per_minute: int


def synthesize_template(context: Mapping[str, object] | None = None) -> dict[str, Any]:
    import os
    import tempfile

    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
    os.environ.setdefault("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "1")
    from infra.app import build_app

    with tempfile.TemporaryDirectory() as outdir:
        app, stacks = build_app({"clusterName": CLUSTER, **(context or {})}, outdir=outdir, nag=False)
        assembly = app.synth()
        return dict(json.loads((Path(assembly.directory) / stacks[0].template_file).read_text()))


def template_facts(template: Mapping[str, Any]) -> TemplateFacts:
    from infra.functions import FUNCTION_SPECS

    resources: Mapping[str, Any] = template["Resources"]
    by_description = {
        f"serverless-karpenter {CLUSTER}: {spec.description}": spec.name for spec in FUNCTION_SPECS
    }
    functions: dict[str, dict[str, Any]] = {}
    alarms: list[dict[str, Any]] = []
    event_sources = dashboards = keys = queue_schedules = 0
    for resource in resources.values():
        kind, props = resource["Type"], resource.get("Properties", {})
        if kind == "AWS::Lambda::Function":
            name = by_description.get(props.get("Description", ""))
            if name is not None:
                functions[name] = {
                    "memory_mb": int(props.get("MemorySize", 128)),
                    "architecture": (props.get("Architectures") or ["x86_64"])[0],
                    "tracing": props.get("TracingConfig", {}).get("Mode", "PassThrough"),
                }
        elif kind == "AWS::Lambda::EventSourceMapping":
            event_sources += 1
        elif kind == "AWS::CloudWatch::Alarm":
            # Priced per metric the alarm reads: a metric-math alarm pays for each metric it uses.
            metrics = sum(1 for m in props.get("Metrics", []) if "MetricStat" in m) or 1
            alarms.append({"name": props.get("AlarmName", ""), "metrics": metrics})
        elif kind == "AWS::CloudWatch::Dashboard":
            dashboards += 1
        elif kind == "AWS::KMS::Key":
            keys += 1
        elif kind == "AWS::Events::Rule" and "ScheduleExpression" in props:
            # A schedule that sends a queue a message (the termination function's) costs SQS requests.
            targets = [t.get("Arn") for t in props.get("Targets", [])]
            queue_schedules += sum(1 for arn in targets if _refers_to(resources, arn, "AWS::SQS::Queue"))
    return TemplateFacts(functions, event_sources, alarms, dashboards, keys, queue_schedules)


def _refers_to(resources: Mapping[str, Any], value: Any, resource_type: str) -> bool:
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        return bool(resources.get(value["Fn::GetAtt"][0], {}).get("Type") == resource_type)
    return False


# -- the bill ----------------------------------------------------------------------------------------


def bill(period: SimulatedPeriod, facts: TemplateFacts, prices: Mapping[str, Any]) -> dict[str, Any]:
    scale = MINUTES_PER_MONTH / period.minutes  # simulated period -> month
    items: dict[str, float] = {}
    detail: dict[str, Any] = {}
    free = prices["free_tiers"]

    lambda_invocations = 0.0
    traced = 0.0
    log_bytes = 0.0
    dynamodb_reads = dynamodb_writes = 0.0
    for name, run in period.functions.items():
        spec = facts.functions[name]
        invocations = run.invocations * scale
        billed = math.ceil(run.billed_seconds / max(run.invocations, 1) * 1000) / 1000 * invocations
        gb_seconds = billed * spec["memory_mb"] / 1024
        items[f"lambda {name} (duration)"] = gb_seconds * prices["lambda_gb_second"][spec["architecture"]]
        lambda_invocations += invocations
        if spec["tracing"] == "Active":
            traced += invocations  # Lambda traces 1 invocation a second and 5% beyond: all of these
        log_bytes += (run.log_bytes / max(run.passes, 1) + PLATFORM_LOG_BYTES) * invocations
        calls_per_invocation = {k: v / max(run.passes, 1) for k, v in run.api_calls.items()}
        for call, per in calls_per_invocation.items():
            service, operation = call.split(":", 1)
            if service == "dynamodb":
                if operation in DYNAMODB_WRITES:
                    dynamodb_writes += per * invocations
                else:
                    dynamodb_reads += per * invocations
        detail[name] = {
            "memory_mb": spec["memory_mb"],
            "architecture": spec["architecture"],
            "tracing": spec["tracing"],
            "invocations_per_month": round(invocations),
            "billed_seconds_per_invocation": round(run.billed_seconds / max(run.invocations, 1), 3),
            "gb_seconds_per_month": round(gb_seconds),
            "simulated_passes": run.passes,
            "wall_seconds_per_pass": round(run.wall_seconds / max(run.passes, 1), 4),
            "log_bytes_per_pass": round(run.log_bytes / max(run.passes, 1)),
            "api_calls_per_pass": {k: round(v, 2) for k, v in sorted(calls_per_invocation.items())},
            "kube_requests_per_minute": round(period.kube_requests.get(name, 0) / period.minutes, 2),
        }
    items["lambda requests"] = lambda_invocations * prices["lambda_request"]
    items["x-ray traces"] = traced * prices["xray_trace_recorded"]
    items["cloudwatch logs (ingestion)"] = log_bytes / 1e9 * prices["cloudwatch_logs_ingested_gb"]

    receives = (
        facts.event_sources * prices["sqs_event_source_idle_pollers"] * (60 / prices["sqs_long_poll_seconds"])
    )
    # The termination schedule's message: EventBridge sends it, the poller deletes it after the pass.
    sqs_requests = (receives + 2 * facts.scheduled_queue_messages_per_minute) * MINUTES_PER_MONTH
    items["sqs requests (event-source pollers)"] = sqs_requests * prices["sqs_request"]
    items["dynamodb requests"] = (
        dynamodb_reads * prices["dynamodb_read_request_unit"]
        + dynamodb_writes * prices["dynamodb_write_request_unit"]
    )

    custom = [s for s in period.metric_streams if not s["namespace"].startswith("AWS/")]
    items["cloudwatch custom metrics"] = len(custom) * prices["cloudwatch_custom_metric_month"]
    alarm_metrics = sum(a["metrics"] for a in facts.alarms)
    items["cloudwatch alarms"] = alarm_metrics * prices["cloudwatch_alarm_metric_month"]
    items["cloudwatch dashboards"] = facts.dashboards * prices["cloudwatch_dashboard_month"]
    items["kms keys"] = facts.kms_keys * prices["kms_key_month"]

    total = sum(items.values())
    gb_seconds_total = sum(d["gb_seconds_per_month"] for d in detail.values())
    return {
        "prices": {"region": prices["region"], "as_of": prices["as_of"], "file": PRICES_FILE.name},
        "simulated_minutes": period.minutes,
        "wall_seconds": round(period.wall_seconds, 1),
        "lambda_failures": period.lambda_failures,
        "usd_per_month": {k: round(v, 3) for k, v in sorted(items.items(), key=lambda kv: -kv[1])},
        "total_usd_per_month": round(total, 2),
        # CloudWatch's first 3 dashboards are free per account: the bill of a cluster whose account has
        # fewer than 3 other dashboards.
        "total_usd_per_month_dashboard_in_free_tier": round(total - items["cloudwatch dashboards"], 2)
        if facts.dashboards <= free["cloudwatch_dashboards"]
        else round(total, 2),
        "functions": detail,
        "counts_per_month": {
            "lambda_invocations": round(lambda_invocations),
            "lambda_gb_seconds": gb_seconds_total,
            "xray_traces": round(traced),
            "sqs_requests": round(sqs_requests),
            "dynamodb_read_requests": round(dynamodb_reads),
            "dynamodb_write_requests": round(dynamodb_writes),
            "log_gb": round(log_bytes / 1e9, 3),
        },
        "metric_streams": custom,
        "alarms": facts.alarms,
        "dashboards": facts.dashboards,
        "kms_keys": facts.kms_keys,
        "sqs_event_sources": facts.event_sources,
        # Per account, not per cluster: what they would cover if this stack were the account's only user.
        "free_tier_would_cover": {
            "lambda_gb_seconds": gb_seconds_total <= free["lambda_gb_seconds_month"],
            "dashboards": facts.dashboards <= free["cloudwatch_dashboards"],
            "alarms": alarm_metrics <= free["cloudwatch_alarm_metrics"],
            "custom_metrics": len(custom) <= free["cloudwatch_custom_metrics"],
            "sqs_requests": sqs_requests <= free["sqs_requests_month"],
            "xray_traces": traced <= free["xray_traces_month"],
        },
    }


def measure(minutes: float, replicas: int = 0, context: Mapping[str, object] | None = None) -> dict[str, Any]:
    facts = template_facts(synthesize_template(context))
    result = bill(simulate(minutes, replicas), facts, load_prices())
    result["workload_replicas"] = replicas
    return result


def register(commands: Any) -> None:
    parser = commands.add_parser("idle-cost", help="$ per month of an idle cluster's control plane, by item")
    parser.add_argument("--minutes", type=float, default=60.0, help="idle virtual minutes to simulate")
    parser.add_argument(
        "--replicas",
        type=int,
        default=0,
        help="keep the default scenario's Deployment (1 CPU, 1.5Gi a pod) at this many pods: an idle cluster "
        "with nodes (default 0: no workload, no node)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    result = measure(args.minutes, args.replicas)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return 0
    minutes, as_of = result["simulated_minutes"], result["prices"]["as_of"]
    print(f"idle cluster, {minutes:.0f} simulated minutes, prices of {as_of}")
    for item, usd in result["usd_per_month"].items():
        print(f"{item:>40}: ${usd:8.3f}/month")
    print(f"{'total':>40}: ${result['total_usd_per_month']:8.2f}/month")
    free = result["total_usd_per_month_dashboard_in_free_tier"]
    print(f"{'total, the dashboard in the free tier':>40}: ${free:8.2f}/month")
    return 0
