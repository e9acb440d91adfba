"""`serverless-karpenter simulate`: the local end-to-end run, with progress and a report."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from serverless_karpenter_sim.scenario import ScenarioError, load_scenario

if TYPE_CHECKING:
    from serverless_karpenter_sim.simulation import Simulation


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "simulate",
        help="run the control plane end to end on a local simulated cluster and cloud",
        description=(
            "Runs the real Lambda handlers against moto (AWS) and a simulated Kubernetes API server on "
            "127.0.0.1, on virtual time. No AWS account is needed."
        ),
        epilog=(
            "examples:\n"
            "  serverless-karpenter simulate\n"
            "  serverless-karpenter simulate --scenario my-scenario.yaml --json\n"
            "  serverless-karpenter simulate --keep    # then, elsewhere: serverless-karpenter status --local"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--scenario", default="default", help="a built-in scenario name or a YAML file (default: %(default)s)"
    )
    parser.add_argument(
        "--json", action="store_true", help="print the report as one JSON object on the last line of stdout"
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help=(
            "after the scenario, keep moto and the Kubernetes API server running (until Ctrl-C) for "
            "`status --local`, `doctor --local` and `explain pod --local`"
        ),
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as error:
        err.print(f"[red]error:[/red] {error}", soft_wrap=True, highlight=False)
        return 2
    # Imported here so that `--help` and scenario errors stay fast.
    from serverless_karpenter_sim.simulation import Simulation, log_path

    path = log_path(scenario.name)
    started = time.monotonic()
    with (
        path.open("w") as log,
        err.status(f"simulating {scenario.name!r}: starting moto and the cluster...") as status,
    ):

        def progress(sim: Simulation) -> None:
            if int(sim.elapsed) % 5:
                return
            pods = [
                p
                for p in sim.kube.list_pods()
                if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
            ]
            running = sum(1 for p in pods if p.get("status", {}).get("phase") == "Running")
            status.update(
                f"simulating {scenario.name!r}: t={sim.elapsed:.0f}s  pods {running}/{len(pods)} Running  "
                f"nodeclaims {len(sim.launch_order)}"
            )

        simulation = Simulation(scenario, log=log, on_tick=progress)
        try:
            simulation.start()
            report = simulation.run()
        except Exception as error:  # the report says what failed; the log has the detail
            err.print(
                f"[red]simulation failed:[/red] {type(error).__name__}: {error} (Lambda logs: {path})",
                highlight=False,
            )
            simulation.stop()
            return 1
        except BaseException:
            simulation.stop()
            raise
        if not getattr(args, "keep", False):
            simulation.stop()
    out = Console()
    wall = time.monotonic() - started
    table = Table(
        title=f"scenario {scenario.name}: {report.virtual_seconds:.0f} virtual seconds in {wall:.0f}s"
    )
    for column in ("nodeclaim", "nodepool", "instance type", "zone", "capacity", "state", "node"):
        table.add_column(column)
    for claim in report.nodeclaims:
        table.add_row(
            claim["name"],
            claim["nodepool"],
            claim["instance_type"] or "-",
            claim["zone"] or "-",
            claim["capacity_type"] or "-",
            claim["state"],
            claim["node"] or "-",
        )
    out.print(table)
    pods = report.pods
    out.print(
        f"pods: {pods['running']}/{pods['total']} Running, {pods['pending']} pending   "
        f"instances: {report.instances['running']} running, {report.instances['terminated']} terminated   "
        f"cost: ${report.cost_per_hour:.4f}/h   interruption messages handled: {report.events_handled}   "
        f"DLQ: {report.dlq_messages}",
        highlight=False,
    )
    out.print(f"Lambda logs and metrics: {path}", highlight=False)
    if args.json:
        sys.stdout.flush()
        print(json.dumps(report.to_json(), default=str))
    if getattr(args, "keep", False):
        return keep_running(simulation, out)
    return 0


def keep_running(simulation: Simulation, out: Console) -> int:
    """Leave the simulator up for the operator commands, until Ctrl-C (or SIGTERM)."""
    import signal
    import threading

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)

    from serverless_karpenter_sim.simulation import keep_environment

    from serverless_karpenter_cli.connection import LOCAL_ENV, write_local_env

    try:
        path = write_local_env(keep_environment(simulation))
        out.print(
            f"\nthe simulator keeps running; its endpoints are in {path}. In another terminal, here:\n"
            "  serverless-karpenter status --local\n"
            "  serverless-karpenter doctor --local\n"
            "  serverless-karpenter explain pod --local default/<pod>\n"
            f"  (or `. {path}` to point the AWS CLI and boto3 at moto)\n"
            "Ctrl-C stops it.",
            highlight=False,
        )
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        LOCAL_ENV.unlink(missing_ok=True)
        simulation.stop()
    return 0
