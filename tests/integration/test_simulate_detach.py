"""`simulate --keep --detach` (what `make demo` runs) returns with the report while the simulator stays up
in the background for `status --local` and `doctor --local`, until `simulate --stop`."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import pytest
from serverless_karpenter.adapters import aws
from serverless_karpenter.doctor.checks import CheckId
from serverless_karpenter.runtime import use_control_plane
from serverless_karpenter_cli import simulate
from serverless_karpenter_cli.connection import LOCAL_ENV, SIMULATOR_PID, read_local_env, write_local_env
from serverless_karpenter_cli.main import main

from tests.builders import deployment, nodeclass, nodepool
from tests.integration.simulate import write_scenario

pytestmark = pytest.mark.integration


def running(pid: int) -> bool:
    """Whether the process exists and is not a zombie (an orphan nobody reaps is not running)."""
    with suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


@pytest.fixture
def started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Runs the test in a fresh directory; whatever simulators it records here are stopped afterwards,
    and the environment `--local` loads into this process is undone."""
    monkeypatch.chdir(tmp_path)
    environ = dict(os.environ)
    use_control_plane(None)  # as a separate process: nothing installed
    pids: list[int] = []
    try:
        yield pids
    finally:
        main(["simulate", "--stop"])
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with suppress(ChildProcessError):
                os.waitpid(pid, 0)
        os.environ.clear()
        os.environ.update(environ)
        aws.reset_sessions()


def scenario(tmp_path: Path, steps: list | None = None) -> str:
    manifests = [nodepool(), nodeclass(), deployment("web", 2)]
    return str(write_scenario(tmp_path, {"name": "detached", "manifests": manifests, "steps": steps or []}))


def recorded_pid() -> int:
    return int(read_local_env()[SIMULATOR_PID])


def test_detached_simulator_serves_the_local_commands_until_stopped(
    tmp_path: Path, started: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    path = scenario(tmp_path)
    # As `make demo` and a harness reading its output until EOF run it: in its own process, output piped.
    cli = [sys.executable, "-m", "serverless_karpenter_cli.main", "simulate", "--scenario", path]
    done = subprocess.run(
        [*cli, "--keep", "--detach", "--json"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=simulate.READY_TIMEOUT,  # only a guard against a hang: EOF must come when the CLI exits
        check=False,
    )
    assert done.returncode == 0, done.stderr
    pid = recorded_pid()
    started.append(pid)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["pods"] == {"total": 2, "running": 2, "pending": 0}
    assert "status --local" in done.stderr and "doctor --local" in done.stderr
    assert "explain pod --local" in done.stderr and "simulate --stop" in done.stderr
    # Detached: its own session, nothing of the caller's terminal or pipes.
    assert running(pid) and os.getsid(pid) == pid
    log = str(tmp_path / simulate.DETACHED_LOG)
    fds = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in (0, 1, 2)]
    assert fds == [os.devnull, log, log]

    assert main(["status", "--local", "--json"]) == 0
    status = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {c["name"] for c in status["nodeclaims"]} == {c["name"] for c in report["nodeclaims"]}
    assert status["pending_pods"] == [] and status["cost_per_hour"] > 0
    code = main(["doctor", "--local", "--json"])
    checks = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["checks"]
    # The kept simulator is set up as the stack expects: every check runs, and passes.
    assert code == 0 and [c for c in checks if c["status"] != "ok"] == []
    assert {c["check"] for c in checks} == {c.value for c in CheckId}

    # A second one replaces the first: the env file can point at one simulator only.
    assert main(["simulate", "--scenario", path, "--keep", "--detach"]) == 0
    replaced = capsys.readouterr()
    second = recorded_pid()
    started.append(second)
    assert second != pid and running(second) and not running(pid)
    assert f"stopped the simulator already kept running here (pid {pid})" in replaced.err
    assert "scenario detached:" in replaced.out and "simulate --stop" in replaced.out

    assert main(["simulate", "--stop"]) == 0
    assert f"stopped the simulator (pid {second})" in capsys.readouterr().err
    assert not running(second)
    assert not LOCAL_ENV.exists() and not simulate.DETACHED_RESULT.exists()
    assert main(["simulate", "--stop"]) == 0
    assert "no simulator is kept running here" in capsys.readouterr().err


def test_a_failed_scenario_exits_1_and_keeps_nothing(
    tmp_path: Path, started: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    path = scenario(tmp_path, steps=[{"delete": {"kind": "Node", "name": "${node:0}"}}])
    assert main(["simulate", "--scenario", path, "--keep", "--detach", "--json"]) == 1
    captured = capsys.readouterr()
    assert "simulation failed" in captured.err and str(simulate.DETACHED_LOG) in captured.err
    assert captured.out == ""
    assert not LOCAL_ENV.exists()
    result = json.loads(simulate.DETACHED_RESULT.read_text())
    assert result["exit_code"] == 1 and not running(result["pid"])


def test_a_simulator_that_dies_early_points_at_its_log(
    tmp_path: Path, started: list[int], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        simulate, "child_command", lambda args: [sys.executable, "-c", "print('boom'); raise SystemExit(3)"]
    )
    assert main(["simulate", "--scenario", scenario(tmp_path), "--keep", "--detach"]) == 1
    err = capsys.readouterr().err
    assert "exited with code 3 before it was ready" in err and str(simulate.DETACHED_LOG) in err
    assert simulate.DETACHED_LOG.read_text().strip() == "boom"


def test_a_simulator_not_ready_in_time_is_stopped(
    tmp_path: Path, started: list[int], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        simulate, "child_command", lambda args: [sys.executable, "-c", "import time; time.sleep(600)"]
    )
    code = main(["simulate", "--scenario", scenario(tmp_path), "--keep", "--detach", "--ready-timeout", "0"])
    err = capsys.readouterr().err
    assert code == 1 and "was not done after 0s, so it was stopped" in err
    match = re.search(r"pid (\d+)", err)
    assert match is not None and not running(int(match.group(1)))


def test_stop_forgets_a_stale_pid_without_signalling_it(
    tmp_path: Path, started: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    # An exited process, then a live one that is not a simulator (this test): neither is signalled.
    for pid in (gone.pid, os.getpid()):
        write_local_env({"CLUSTER_NAME": "demo", SIMULATOR_PID: str(pid)})
        assert main(["simulate", "--stop"]) == 0
        assert f"no simulator is running any more for {LOCAL_ENV} (pid {pid}); removed it" in (
            capsys.readouterr().err
        )
        assert not LOCAL_ENV.exists()


def test_detach_needs_keep(tmp_path: Path, started: list[int], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--detach"]) == 2
    assert "--detach needs --keep" in capsys.readouterr().err
