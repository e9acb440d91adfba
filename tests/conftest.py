"""Shared by every test level (unit, integration, infra; each has its own conftest.py where it needs one).

A test's level is its folder: every test under tests/integration carries the ``integration`` marker and
every test under tests/infra the ``infra`` marker, whether or not its module says so, so that
``-m "not integration"`` runs exactly the in-process tests and ``-m infra`` exactly the CDK ones."""

from __future__ import annotations

from pathlib import Path

import pytest

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
