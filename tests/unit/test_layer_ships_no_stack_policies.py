"""The Lambda layer ships the core only: the stack's IAM statements live outside it (the functions never
read them), and nothing in the layer imports them, since a deployed function could not."""

from __future__ import annotations

import ast
from pathlib import Path

from serverless_karpenter_stack import policies

REPO = Path(__file__).resolve().parents[2]
CORE_LAYER = REPO / "layers" / "core"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_the_policies_are_not_in_the_layer() -> None:
    assert CORE_LAYER not in Path(policies.__file__).resolve().parents
    assert not list(CORE_LAYER.rglob("policies.py"))


def test_nothing_in_the_layer_imports_what_it_does_not_ship() -> None:
    importers = [
        str(path.relative_to(REPO))
        for path in CORE_LAYER.rglob("*.py")
        if any(
            name.startswith(("serverless_karpenter_stack", "serverless_karpenter.policies"))
            for name in _imports(path)
        )
    ]
    assert importers == []
