"""`serverless-karpenter simulate`: the local end-to-end run, with progress and a report. With `--keep` the
simulator then stays up for the operator commands (`status --local`, ...): in the foreground until Ctrl-C,
or with `--detach` in a background process that `simulate --stop` ends."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from serverless_karpenter_sim.scenario import ScenarioError, load_scenario

from serverless_karpenter_cli.connection import LOCAL_ENV, SIMULATOR_PID, read_local_env, write_local_env
from serverless_karpenter_cli.invariants_report import exit_code, print_invariants

if TYPE_CHECKING:
    from serverless_karpenter_sim.simulation import Simulation

# A detached simulator's stdout and stderr: never the caller's, or whoever reads `make demo`'s output
# until EOF would wait as long as the simulator holds the pipe open.
DETACHED_LOG = LOCAL_ENV.parent / "simulator.log"
# What a detached simulator hands back once its scenario is over: its pid, exit code, report or error.
DETACHED_RESULT = LOCAL_ENV.parent / "simulator-result.json"
READY_TIMEOUT = 600.0
# How long `--stop` waits after SIGTERM (moto and the API server shut down) before SIGKILL, and after it.
STOP_GRACE = 15.0
# kubectl's configuration for the kept simulator's API server (its address, CA and token).
KUBECONFIG = LOCAL_ENV.parent / "kubeconfig"


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
            "  serverless-karpenter simulate --keep --detach   # returns; the simulator stays up\n"
            "  serverless-karpenter status --local              # also: doctor --local, explain pod --local\n"
            "  serverless-karpenter simulate --stop             # stops the simulator kept running here\n"
            "  serverless-karpenter simulate --keep             # stays in the foreground until Ctrl-C\n"
            "\nexit codes: 0 every invariant held, 1 the run failed, 2 a bad scenario or option, "
            "3 an invariant failed"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--scenario", default="default", help="a built-in scenario name or a YAML file (default: %(default)s)"
    )
    parser.add_argument(
        "--json", action="store_true", help="print the report as one JSON object on the last line of stdout"
    )
    lifetime = parser.add_mutually_exclusive_group()
    lifetime.add_argument(
        "--keep",
        action="store_true",
        help=(
            "after the scenario, keep moto and the Kubernetes API server running (until Ctrl-C, or "
            "`simulate --stop` with --detach) for `status --local`, `doctor --local` and "
            f"`explain pod --local`; replaces a simulator already kept running here ({LOCAL_ENV})"
        ),
    )
    lifetime.add_argument(
        "--stop", action="store_true", help="stop the simulator kept running here by `--keep`, and exit"
    )
    parser.add_argument(
        "--detach",
        action="store_true",
        help=(
            "with --keep: run the simulator in a background process and return with its report once the "
            f"scenario is over (its output goes to {DETACHED_LOG})"
        ),
    )
    parser.add_argument(
        "--ready-timeout",
        type=float,
        default=READY_TIMEOUT,
        metavar="SECONDS",
        help="with --detach: how long to wait for the scenario to finish (default: %(default).0f)",
    )
    # The background process `--detach` starts: it hands its result back through DETACHED_RESULT.
    parser.add_argument("--detached-child", action="store_true", help=argparse.SUPPRESS)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # Soft wrap: paths and commands stay whole, to be copied.
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    if args.stop:
        return 0 if stop_kept(err) else 1
    if args.detach and not args.keep:
        err.print("[red]error:[/red] --detach needs --keep")
        return 2
    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as error:
        err.print(f"[red]error:[/red] {escape(str(error))}")
        return 2
    if args.keep and not args.detached_child and not stop_kept(err, replacing=True):
        return 1
    if args.detach:
        return run_detached(args, err)
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
            report = simulation.run().to_json()
        except Exception as error:  # the report says what failed; the log has the detail
            message = f"simulation failed: {type(error).__name__}: {error} (Lambda logs: {path})"
            err.print(f"[red]{escape(message)}[/red]")
            if args.detached_child:
                write_result({"pid": os.getpid(), "exit_code": 1, "error": message})
            simulation.stop()
            return 1
        except BaseException:
            simulation.stop()
            raise
        if not args.keep:
            simulation.stop()
    print_report(report, time.monotonic() - started, path, as_json=args.json)
    if not args.keep:
        return exit_code(report)

    def ready() -> None:
        if args.detached_child:
            write_result({"pid": os.getpid(), "exit_code": 0, "report": report, "log": str(path)})
        else:
            # With --json the report's line stays the last one on stdout.
            Console(stderr=args.json, highlight=False, soft_wrap=True).print(
                usage(os.getpid(), detached=False)
            )

    return keep_running(simulation, on_ready=ready) or exit_code(report)


def print_report(report: dict[str, Any], wall: float, log: Path | str, as_json: bool) -> None:
    out = Console(highlight=False)
    table = Table(
        title=f"scenario {report['scenario']}: {report['virtual_seconds']:.0f} virtual seconds in {wall:.0f}s"
    )
    for column in ("nodeclaim", "nodepool", "instance type", "zone", "capacity", "state", "node"):
        table.add_column(column)
    for claim in report["nodeclaims"]:
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
    pods, instances = report["pods"], report["instances"]
    out.print(
        f"pods: {pods['running']}/{pods['total']} Running, {pods['pending']} pending   "
        f"instances: {instances['running']} running, {instances['terminated']} terminated   "
        f"cost: ${report['cost_per_hour']:.4f}/h   interruption messages handled: {report['events_handled']}"
        f"   DLQ: {report['dlq_messages']}"
    )
    print_invariants(out, report)
    out.print(f"Lambda logs and metrics: {log}")
    if as_json:
        sys.stdout.flush()
        print(json.dumps(report, default=str))


def keep_running(simulation: Simulation, on_ready: Callable[[], None]) -> int:
    """Leave the simulator up for the operator commands, until Ctrl-C (or SIGTERM: `simulate --stop`)."""
    import threading

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)

    from serverless_karpenter_sim.kubeapi.kubeconfig import write_kubeconfig
    from serverless_karpenter_sim.simulation import keep_environment

    try:
        kubeconfig = write_kubeconfig(KUBECONFIG, simulation.kube_server, simulation.cluster_name).resolve()
        environment = {**keep_environment(simulation), "KUBECONFIG": str(kubeconfig)}
        write_local_env({**environment, SIMULATOR_PID: str(os.getpid())})
        on_ready()
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        # Unless it already points at a simulator that replaced this one.
        if _recorded_pid() == os.getpid():
            LOCAL_ENV.unlink(missing_ok=True)
            KUBECONFIG.unlink(missing_ok=True)
        simulation.stop()
    return 0


def usage(pid: int, detached: bool) -> str:
    program = _program()
    return (
        f"\nthe simulator keeps running (pid {pid}"
        + (f", output in {DETACHED_LOG}" if detached else "")
        + f"); its endpoints are in {LOCAL_ENV}. "
        + ("From this directory:\n" if detached else "In another terminal, here:\n")
        + f"  {program} status --local\n"
        f"  {program} doctor --local\n"
        f"  {program} explain pod --local default/<pod>\n"
        f"  (or `. {LOCAL_ENV}` to point the AWS CLI and boto3 at moto, and kubectl at the cluster)\n"
        "kubectl reaches the simulated cluster with:\n"
        f"  export KUBECONFIG={KUBECONFIG.resolve()}\n"
        + (f"`{program} simulate --stop` stops it." if detached else "Ctrl-C stops it.")
    )


def _program() -> str:
    """How to run this command again from here: its name when that is on PATH (an activated venv), else
    the path it was run by (`make demo` runs .venv/bin/serverless-karpenter)."""
    invoked = Path(sys.argv[0])
    if invoked.name != "serverless-karpenter":
        return "serverless-karpenter"
    on_path = shutil.which(invoked.name)
    if on_path and Path(on_path).resolve() == invoked.resolve():
        return invoked.name
    return str(invoked)


# -- the detached simulator ------------------------------------------------------------------------------


class NotReady(Exception):
    """The detached simulator died or timed out before its scenario was over; the message says where to
    look."""


def child_command(args: argparse.Namespace) -> list[str]:
    return [
        sys.executable,
        "-m",
        "serverless_karpenter_cli.main",
        "simulate",
        "--scenario",
        args.scenario,
        "--keep",
        "--detached-child",
    ]


def run_detached(args: argparse.Namespace, err: Console) -> int:
    LOCAL_ENV.parent.mkdir(parents=True, exist_ok=True)
    DETACHED_RESULT.unlink(missing_ok=True)
    started = time.monotonic()
    with DETACHED_LOG.open("w") as log:
        child = subprocess.Popen(
            child_command(args),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            # Its own session: Ctrl-C in this terminal, or the end of `make`, does not reach it.
            start_new_session=True,
        )
    try:
        with err.status(f"simulating {args.scenario!r} in the background (output in {DETACHED_LOG})..."):
            result = wait_until_ready(child, args.ready_timeout)
    except NotReady as error:
        _end(child)
        err.print(f"[red]error:[/red] {escape(str(error))}")
        return 1
    except BaseException:
        _end(child)
        raise
    code = int(result["exit_code"])
    if code:
        _end(child, grace=STOP_GRACE)  # it stops by itself once it has handed back its failure
        err.print(f"[red]{escape(result['error'])}[/red] (simulator output: {DETACHED_LOG})")
        return code
    # It outlives this process by design and nothing here waits for it: tell Popen so, or it warns when
    # collected. (`simulate --stop` from this same process still reaps it.)
    child.returncode = 0
    print_report(result["report"], time.monotonic() - started, result["log"], as_json=args.json)
    # With --json the report's line stays the last one on stdout.
    Console(stderr=args.json, highlight=False, soft_wrap=True).print(usage(child.pid, detached=True))
    return exit_code(result["report"])


def wait_until_ready(child: subprocess.Popen[bytes], timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        exited = child.poll()
        result = _read_result()
        if result is not None and result.get("pid") == child.pid:
            return result
        if exited is not None:
            raise NotReady(
                f"the simulator (pid {child.pid}) exited with code {exited} before it was ready; "
                f"see {DETACHED_LOG}"
            )
        if time.monotonic() >= deadline:
            raise NotReady(
                f"the simulator (pid {child.pid}) was not done after {timeout:.0f}s, so it was stopped; "
                f"see {DETACHED_LOG} (a longer scenario may need --ready-timeout)"
            )
        time.sleep(0.2)


def write_result(result: dict[str, Any]) -> None:
    # Written whole and then renamed, so that the waiting parent never reads half of it.
    partial = DETACHED_RESULT.with_suffix(".tmp")
    partial.write_text(json.dumps(result, default=str))
    partial.replace(DETACHED_RESULT)


def _read_result() -> dict[str, Any] | None:
    try:
        result = json.loads(DETACHED_RESULT.read_text())
    except FileNotFoundError:
        return None
    return result if isinstance(result, dict) else None


def _end(child: subprocess.Popen[bytes], grace: float = 0.0) -> None:
    try:
        child.wait(grace)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


# -- stopping a kept simulator ---------------------------------------------------------------------------


def stop_kept(err: Console, replacing: bool = False) -> bool:
    """Stop the simulator this directory's local env file points at, if it still runs, and forget it.
    False when it would not stop.

    A new `--keep` replaces a running one rather than refusing: the env file can point at one simulator
    only, and `make demo` run twice must work the second time too."""
    if not LOCAL_ENV.exists():
        if not replacing:
            err.print(f"no simulator is kept running here ({LOCAL_ENV} does not exist)")
        return True
    pid = _recorded_pid()
    if pid is None or not _is_simulator(pid):
        # A stale file: the simulator was killed, the machine rebooted, or the pid now belongs to another
        # program, which must not be signalled.
        err.print(f"no simulator is running any more for {LOCAL_ENV} (pid {pid or 'unknown'}); removed it")
    else:
        what = "the simulator already kept running here" if replacing else "the simulator"
        if not _terminate(pid):
            err.print(f"[red]error:[/red] {what} (pid {pid}) did not stop, even on SIGKILL")
            return False
        err.print(f"stopped {what} (pid {pid})")
    LOCAL_ENV.unlink(missing_ok=True)
    KUBECONFIG.unlink(missing_ok=True)
    DETACHED_RESULT.unlink(missing_ok=True)
    return True


def _recorded_pid() -> int | None:
    try:
        text = read_local_env().get(SIMULATOR_PID, "")
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() else None


def _process(pid: int) -> tuple[bool, list[str]] | None:
    """Whether process ``pid`` still runs, and its arguments; None when there is no such process. A zombie
    does not run: the detached simulator's parent has exited, and a container's init may never reap it.
    An exiting process may show no arguments any more, but it runs until it is a zombie."""
    # Our own child (a test, or a caller that has not exited) stays a zombie until reaped: reap it if done.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    proc = Path("/proc") / str(pid)
    if Path("/proc/self/stat").exists():
        try:
            state = (proc / "stat").read_text().rpartition(")")[2].split()[0]
            argv = [a.decode(errors="replace") for a in (proc / "cmdline").read_bytes().split(b"\0") if a]
        except (OSError, IndexError):
            return None
    else:  # macOS: no /proc
        ps = subprocess.run(
            ["ps", "-o", "stat=", "-o", "command=", "-p", str(pid)],
            capture_output=True,
            text=True,
            check=False,
        )
        state, _, command = ps.stdout.strip().partition(" ")
        if ps.returncode or not state:
            return None
        argv = command.split()
    return not state.startswith(("Z", "X")), argv


def _is_simulator(pid: int) -> bool:
    """Whether ``pid`` is a running `serverless-karpenter simulate`, rather than gone or another program
    that was given the pid since."""
    process = _process(pid)
    if process is None or not process[0] or "simulate" not in process[1]:
        return False
    return any(
        Path(a).name in ("serverless-karpenter", "serverless_karpenter_cli.main")
        or Path(a).parent.name == "serverless_karpenter_cli"
        for a in process[1]
    )


def _terminate(pid: int) -> bool:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
        except PermissionError:  # another user's: not ours to stop
            return False
        deadline = time.monotonic() + STOP_GRACE
        while time.monotonic() < deadline:
            process = _process(pid)
            if process is None or not process[0]:
                return True
            time.sleep(0.1)
    return False
