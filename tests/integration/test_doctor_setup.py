"""`doctor` against moto server and the simulated cluster: a correct set-up passes every check."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from serverless_karpenter_cli.main import main

from tests.integration.doctor_setup import DoctorSetup, start_correct_setup

pytestmark = pytest.mark.integration


@pytest.fixture
def setup() -> Iterator[DoctorSetup]:
    yield from start_correct_setup()


def doctor(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict]:
    code = main(["doctor", "--cluster", "doctor", "--json", *extra])
    return code, json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_correct_setup_passes_every_check(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = doctor(capsys)
    by_status: dict[str, set[str]] = {}
    for check in report["checks"]:
        by_status.setdefault(check["status"], set()).add(check["check"])
    assert by_status.get("fail") is None, report
    assert code == 0
    assert by_status["ok"] == {
        "stack",
        "interruption-queue",
        "interruption-rules",
        "nodeclass-selectors",
        "ami-aliases",
        "node-role",
        "kms-keys",
        "spot-service-linked-role",
        "daemonsets-fit",
    }
    # moto has no iam:SimulatePrincipalPolicy: the check says it could not run, never that it passed.
    assert by_status["skipped"] == {"lambda-permissions"}
    skipped = [c for c in report["checks"] if c["status"] == "skipped"]
    assert len(skipped) == 5 and all("not" in c["summary"] for c in skipped)
    selectors = next(c for c in report["checks"] if c["check"] == "nodeclass-selectors")
    assert "3 subnet(s) in 3 zone(s) (us-east-1a, us-east-1b, us-east-1c), 1 security group(s)" in selectors["summary"]


def test_human_output_marks_each_check(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--cluster", "doctor"]) == 0
    out = capsys.readouterr().out
    assert "✓ [stack]" in out and "✓ [daemonsets-fit]" in out and "- [lambda-permissions]" in out
    assert "✗" not in out
