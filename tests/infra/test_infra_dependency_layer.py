"""The dependency layer: build.py's trimming and size check, and requirements.txt against what the code
imports, pyproject.toml and uv.lock (which the tests' environment is installed from)."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path

import pytest

from infra.layers import build_script
from tests.infra.conftest import Synthesized

pytestmark = pytest.mark.infra

REPO = Path(__file__).resolve().parents[2]
CODE_ROOTS = (REPO / "layers" / "core" / "python" / "serverless_karpenter", REPO / "functions")
PROVIDED_BY_RUNTIME = {"boto3", "botocore"}


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


LAYER_REQUIREMENTS = REPO / "layers" / "dependencies" / "requirements.txt"


def requirements() -> dict[str, str]:
    """Normalized distribution name -> pinned version, for each requirement (with its hashes) of the layer."""
    pins: dict[str, str] = {}
    # A requirement continues over backslash-ended lines with its --hash options.
    text = LAYER_REQUIREMENTS.read_text().replace("\\\n", " ")
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(
            r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?==([^\s;]+)(\s*;[^-]*)?((\s+--hash=sha256:[0-9a-f]{64})+)", line
        )
        assert match, f"requirement not pinned with its hashes: {line!r}"
        pins[normalize(match[1])] = match[3]
    return pins


def lock() -> dict[str, dict]:
    """uv.lock's packages by normalized name."""
    packages = tomllib.loads((REPO / "uv.lock").read_text())["package"]
    return {normalize(package["name"]): package for package in packages}


def runtime_closure(packages: dict[str, dict]) -> set[str]:
    """Every package the project's runtime dependencies pull in, extras followed, markers ignored (so a
    superset of what one platform installs, which is what a universal export lists)."""
    found: set[str] = set()

    def visit(dependencies: Iterable[dict]) -> None:
        for dependency in dependencies:
            name = normalize(dependency["name"])
            extras = dependency.get("extra", [])
            key = f"{name}[{','.join(sorted(extras))}]"
            if key in found:
                continue
            found.add(key)
            package = packages[name]
            visit(package.get("dependencies", []))
            for extra in extras:
                visit(package.get("optional-dependencies", {}).get(extra, []))

    visit(packages["serverless-karpenter"]["dependencies"])
    return {key.split("[", 1)[0] for key in found}


def runtime_imports() -> dict[str, Path]:
    """Top-level third-party modules the Lambda code imports at run time (not under TYPE_CHECKING)."""
    found: dict[str, Path] = {}
    for root in CODE_ROOTS:
        for path in root.rglob("*.py"):
            tree = ast.parse(path.read_text())
            type_checking_only = {
                id(child)
                for node in ast.walk(tree)
                if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                for child in ast.walk(node)
            }
            for node in ast.walk(tree):
                if id(node) in type_checking_only:
                    continue
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top in sys.stdlib_module_names or top in ("serverless_karpenter", "__future__"):
                        continue
                    found.setdefault(top, path)
    return found


# -- build.py -------------------------------------------------------------------------------------------


def _install(site: Path, distribution: str, version: str, files: dict[str, str]) -> None:
    dist_info = site / f"{distribution}-{version}.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(f"Name: {distribution}\nVersion: {version}\n")
    (dist_info / "INSTALLER").write_text("pip\n")
    records = []
    for relative, content in files.items():
        target = site / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        records.append(f"{relative},,")
    records += [f"{dist_info.name}/METADATA,,", f"{dist_info.name}/INSTALLER,,", f"{dist_info.name}/RECORD,,"]
    (dist_info / "RECORD").write_text("\n".join(records) + "\n")


def test_trimming_drops_runtime_provided_and_unused_code_and_keeps_the_rest(tmp_path: Path) -> None:
    build = build_script()
    site = tmp_path / "python"
    _install(site, "botocore", "1.0", {"botocore/__init__.py": "", "botocore/data/ec2.json": "{}"})
    _install(site, "aiohttp", "3.0", {"aiohttp/__init__.py": "", "aiohttp/_http.so": "x"})
    _install(site, "google_auth", "2.0", {"google/auth/__init__.py": ""})  # shares google/ with a kept dist
    _install(site, "protobuf", "5.0", {"google/protobuf/__init__.py": ""})
    _install(
        site,
        "kubernetes",
        "37.0",
        {
            "kubernetes/__init__.py": "",
            "kubernetes/aio/__init__.py": "",
            "kubernetes/client/__init__.py": "",
            "kubernetes/test/test_api.py": "",
            "kubernetes/e2e_test/test_e2e.py": "",
        },
    )
    _install(site, "pydantic", "2.0", {"pydantic/__init__.py": "", "pydantic/v1/testing.py": ""})
    (site / "pydantic" / "__pycache__").mkdir()
    (site / "pydantic" / "__pycache__" / "main.cpython-312.pyc").write_text("")
    (site / "bin").mkdir()
    (site / "bin" / "normalizer").write_text("#!")

    dropped = build.drop_distributions(site, ["botocore", "aiohttp", "google-auth", "not-installed"])
    build.prune(site)

    assert dropped == ["aiohttp", "botocore", "google_auth"]
    remaining = sorted(str(p.relative_to(site)) for p in site.rglob("*") if p.is_file())
    assert remaining == [
        "google/protobuf/__init__.py",
        "kubernetes-37.0.dist-info/METADATA",
        "kubernetes/__init__.py",
        "kubernetes/client/__init__.py",
        "protobuf-5.0.dist-info/METADATA",
        "pydantic-2.0.dist-info/METADATA",
        "pydantic/__init__.py",
        "pydantic/v1/testing.py",  # a module named "testing" is code, not a test suite
    ]


def test_size_over_the_limit_fails_the_build() -> None:
    build = build_script()
    build.check_size(build.UNZIPPED_LIMIT_BYTES)
    with pytest.raises(SystemExit, match="over Lambda's 250 MiB limit"):
        build.check_size(build.UNZIPPED_LIMIT_BYTES + 1)


def test_a_build_is_reused_only_while_its_stamp_matches(tmp_path: Path) -> None:
    build = build_script()
    assert not build.is_current(tmp_path)
    (tmp_path / build.STAMP_NAME).write_text(build.fingerprint() + "\n")
    assert build.is_current(tmp_path)
    (tmp_path / build.STAMP_NAME).write_text("0" * 64 + "\n")
    assert not build.is_current(tmp_path)


def test_directory_size_counts_file_bytes(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "one").write_bytes(b"x" * 1000)
    (tmp_path / "two").write_bytes(b"y" * 24)
    assert build_script().directory_size(tmp_path) == 1024


# -- requirements -------------------------------------------------------------------------------------


def test_every_third_party_import_of_the_lambda_code_is_a_requirement() -> None:
    distributions = importlib.metadata.packages_distributions()
    pins = requirements()
    for module, path in runtime_imports().items():
        if module in PROVIDED_BY_RUNTIME:
            continue
        owners = {normalize(d) for d in distributions.get(module, [])}
        assert owners & set(pins), (
            f"{module} (imported by {path.relative_to(REPO)}) is not in requirements.txt"
        )


def test_requirements_cover_pyproject_runtime_dependencies() -> None:
    pins = requirements()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["dependencies"]
    for dependency in project["dependencies"]:
        name = normalize(re.split(r"[\[<>=!~; ]", dependency, maxsplit=1)[0])
        assert name in pins, f"{name} is a runtime dependency in pyproject.toml but not in requirements.txt"


def test_layer_requirements_are_the_locks_runtime_packages_at_the_locked_versions() -> None:
    # The tests run what uv.lock pins (`make install` is `uv sync --locked`), so equal pins mean the layer
    # ships what was tested, whatever the registry has published since.
    packages = lock()
    pins = requirements()
    assert set(pins) == runtime_closure(packages), "requirements.txt is stale: run `make lock`"
    for name, version in pins.items():
        assert packages[name]["version"] == version, (
            f"requirements.txt pins {name} {version}, uv.lock {packages[name]['version']}: run `make lock`"
        )


def test_layer_requirements_are_exactly_what_make_lock_exports() -> None:
    exported = subprocess.run(
        [
            str(Path(sys.executable).with_name("uv")),
            "export",
            "--frozen",
            "--no-dev",
            "--no-emit-project",
            "--no-header",
            "--quiet",
            "--format",
            "requirements-txt",
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    header, committed = LAYER_REQUIREMENTS.read_text().split("\n", 1)
    assert header.startswith("# Generated from uv.lock by `make lock`")
    assert committed == exported, "requirements.txt differs from uv.lock's export: run `make lock`"


def test_built_layer_has_every_imported_module_and_no_runtime_provided_sdk(synthesized: Synthesized) -> None:
    # The synth built the layer if it was missing (layers.ensure_dependency_layer).
    assert synthesized.stacks
    build = build_script()
    target = Path(build.TARGET)
    assert build.is_current(target)
    for module in set(runtime_imports()) - PROVIDED_BY_RUNTIME:
        assert (target / module).is_dir() or (target / f"{module}.py").is_file(), module
    for dropped in ("boto3", "botocore", "s3transfer", "aiohttp", "kubernetes/aio"):
        assert not (target / dropped).exists(), dropped
    assert not list(target.rglob("__pycache__"))
    assert 0 < build.directory_size(target) < build.UNZIPPED_LIMIT_BYTES
