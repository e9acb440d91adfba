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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
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
