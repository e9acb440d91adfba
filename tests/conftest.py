"""Shared by every test level (unit, integration, infra; each has its own conftest.py where it needs one).

No test starts or leaves a crash point armed (``serverless_karpenter.crashpoints`` is process-wide: a
simulation test that stopped at one would crash the next test's Lambda there).

A test's level is its folder: every test under tests/integration carries the ``integration`` marker and
every test under tests/infra the ``infra`` marker, whether or not its module says so, so that
``-m "not integration"`` runs exactly the in-process tests and ``-m infra`` exactly the CDK ones."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from serverless_karpenter import crashpoints

TESTS = Path(__file__).resolve().parent
MARKER_OF_FOLDER = {"integration": pytest.mark.integration, "infra": pytest.mark.infra}


# The slowest modules (each test a simulation of tens of virtual minutes, or a simulator in a subprocess),
# measured with `make test`'s --durations. Run first, they leave the short tests for the end, where
# pytest-xdist's work stealing evens out the two workers; run last, one of them ends minutes after the
# other.
SLOWEST_FIRST = (
    "integration/test_simulate_detach.py",
    "integration/test_scale_deprovisioning.py",
    "integration/test_scale_provisioning.py",
    "integration/test_disruption_acceptance.py",
    "integration/test_invariants_page.py",
    "integration/test_disruption_drift_expiration.py",
    "integration/test_faults_lambda.py",
    "integration/test_faults_interruption_inprogress.py",
    "integration/test_faults_kube.py",
    "integration/test_kubectl_keep.py",
    "integration/test_disruption_churn.py",
    "integration/test_faults_sqs.py",
    "integration/test_termination_grace_period.py",
)
LEVEL_ORDER = {"integration": 1, "infra": 2, "unit": 3}


def _run_order(item: pytest.Item) -> int:
    try:
        relative = item.path.resolve().relative_to(TESTS).as_posix()
    except ValueError:
        return len(SLOWEST_FIRST) + 4
    if relative in SLOWEST_FIRST:
        return SLOWEST_FIRST.index(relative) - len(SLOWEST_FIRST)
    return LEVEL_ORDER.get(relative.split("/", 1)[0], 4)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_run_order)  # stable: a module's tests stay together and in their order
    for item in items:
        try:
            folder = item.path.resolve().relative_to(TESTS).parts[0]
        except ValueError:  # collected from outside tests/
            continue
        marker = MARKER_OF_FOLDER.get(folder)
        if marker is not None and marker.name not in {m.name for m in item.iter_markers()}:
            item.add_marker(marker)


@pytest.fixture(autouse=True)
def _no_armed_crashes() -> Iterator[None]:
    crashpoints.disarm_all()
    yield
    crashpoints.disarm_all()
