"""The metrics table in the README and :class:`MetricName` name the same metrics, both ways."""

from __future__ import annotations

import re
from pathlib import Path

from serverless_karpenter.observability import NAMESPACE, MetricName

DOC = Path(__file__).resolve().parents[2] / "README.md"
TABLE = re.compile(r"<!-- metrics:start -->(.*?)<!-- metrics:end -->", re.DOTALL)


def documented_metrics() -> dict[str, list[str]]:
    match = TABLE.search(DOC.read_text())
    assert match, f"{DOC} has no metrics table between the metrics:start/end markers"
    rows: dict[str, list[str]] = {}
    for line in match.group(1).strip().splitlines()[2:]:  # after the header and its rule
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        name = cells[0].strip("`")
        assert name not in rows, f"{name} is documented twice"
        rows[name] = cells
    return rows


def test_every_metric_in_the_code_is_documented() -> None:
    missing = sorted(set(MetricName) - set(documented_metrics()))
    assert not missing, f"add these metrics to the table in {DOC.name}: {missing}"


def test_every_documented_metric_exists_in_the_code() -> None:
    unknown = sorted(set(documented_metrics()) - {m.value for m in MetricName})
    assert not unknown, f"{DOC.name} documents metrics the code does not have: {unknown}"


def test_rows_have_unit_dimensions_and_meaning() -> None:
    for name, cells in documented_metrics().items():
        assert len(cells) == 4, f"{name}: expected metric | unit | dimensions | meaning, got {cells}"
        assert cells[1] and cells[3], f"{name}: unit and meaning are required"


def test_dimensioned_metrics_name_their_dimension() -> None:
    rows = documented_metrics()
    assert rows[MetricName.NODECLAIMS_BY_STATE][2] == "`State`"
    assert rows[MetricName.INTERRUPTION_MESSAGES][2] == "`Kind`"
    assert rows[MetricName.DISRUPTION_ACTIONS][2] == "`Method`"


def test_namespace_is_the_documented_one() -> None:
    assert f"**`{NAMESPACE}`**" in DOC.read_text()
