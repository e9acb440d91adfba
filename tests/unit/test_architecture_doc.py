"""Comments cite docs/architecture.md by section; every cited section exists, and nothing cites the old
DESIGN page, which is not in the repo."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"
CITATION = re.compile(r"docs/architecture\.md §(\d+)")


def _tracked_sources() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return [REPO / name for name in listed if (REPO / name).is_file()]


def test_every_cited_section_exists_and_nothing_cites_design() -> None:
    sections = set(re.findall(r"^## (\d+)\. ", DOC.read_text(), flags=re.MULTILINE))
    cited: dict[str, set[str]] = {}
    stale: list[str] = []
    marker = "DESIGN " + "§"  # spelled apart, so this file does not cite it
    for path in _tracked_sources():
        text = path.read_text()
        if marker in text:
            stale.append(str(path.relative_to(REPO)))
        for section in CITATION.findall(text):
            cited.setdefault(section, set()).add(str(path.relative_to(REPO)))

    assert stale == []
    assert cited, "the core's comments cite the architecture page"
    assert {s: files for s, files in cited.items() if s not in sections} == {}
