#!/usr/bin/env python3
"""Build the dependency Lambda layer: install the locked runtime dependencies for Python 3.14 on arm64, trim
what Lambda does not need, measure the result and refuse to exceed Lambda's size limit.

    python layers/dependencies/build.py           # build if requirements.txt changed since the last build
    python layers/dependencies/build.py --force   # rebuild unconditionally
    python layers/dependencies/build.py --check   # only measure the existing build

requirements.txt is exported from uv.lock by `make lock` (every runtime package with its version and
hashes), so the layer ships exactly what the tests run. uv installs it for the Lambda's platform, so
environment markers are evaluated for Python 3.14 on aarch64 Linux, not for the machine that builds.
The install tries uv's cache first, so a second clone on the same machine builds offline; only the
first build needs the package registry.

The output, ``layers/dependencies/python/``, is a build artefact (git-ignored). It carries a stamp with
the hash of requirements.txt and of this script, so a changed pin or trimming rule triggers a rebuild and
an unchanged one is reused. Only the standard library and the uv binary are used here: the CDK app
imports this module to build the layer on demand.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

LAYER_DIR = Path(__file__).resolve().parent
REQUIREMENTS = LAYER_DIR / "requirements.txt"
TARGET = LAYER_DIR / "python"
STAMP_NAME = ".build-stamp"

PYTHON_VERSION = "3.14"  # infra/layers.py RUNTIME
# Lambda's Python 3.14 runtime is Amazon Linux 2023 (glibc 2.34) on arm64: it runs every manylinux wheel
# up to manylinux_2_34 (manylinux2014 is glibc 2.17).
PLATFORM = "aarch64-manylinux_2_34"

# Lambda's limit for a function plus all its layers, unzipped.
UNZIPPED_LIMIT_BYTES = 250 * 1024 * 1024

# Distributions the layer must not ship, with the reason. Whole distributions are removed through their
# RECORD, so every top-level module they installed goes with them.
DROPPED_DISTRIBUTIONS: dict[str, str] = {
    # The Python 3.14 runtime provides the AWS SDK; aws-xray-sdk pulls botocore in anyway.
    "boto3": "provided by the Lambda runtime",
    "botocore": "provided by the Lambda runtime",
    "s3transfer": "provided by the Lambda runtime",
    # kubernetes>=35 requires aiohttp for its asyncio client (kubernetes.aio); we only use the sync client.
    "aiohttp": "only used by kubernetes.aio",
    "aiohttp_retry": "only used by kubernetes.aio",
    "aiosignal": "aiohttp dependency",
    "aiohappyeyeballs": "aiohttp dependency",
    "frozenlist": "aiohttp dependency",
    "multidict": "aiohttp dependency",
    "yarl": "aiohttp dependency",
    "propcache": "aiohttp dependency",
    "attrs": "aiohttp dependency",
}
# Sub-packages that are never imported at run time.
DROPPED_PACKAGE_PATHS = ("kubernetes/aio",)
# Directory names pruned below a top-level package (never a top-level package itself).
PRUNED_DIRECTORY_NAMES = frozenset({"__pycache__", "tests", "test", "e2e_test"})
PRUNED_SUFFIXES = (".pyc", ".pyo")
# Installer bookkeeping in *.dist-info; METADATA and licences stay (importlib.metadata reads METADATA).
PRUNED_DIST_INFO_FILES = frozenset({"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"})


@dataclass(frozen=True)
class BuildResult:
    path: Path
    size_bytes: int
    rebuilt: bool


def normalize(name: str) -> str:
    """PEP 503 name normalisation, applied to dist-info directory names and our drop list alike."""
    return name.lower().replace("-", "_").replace(".", "_")


def fingerprint() -> str:
    digest = hashlib.sha256()
    for source in (REQUIREMENTS, Path(__file__).resolve()):
        digest.update(source.read_bytes())
    digest.update(" ".join((PYTHON_VERSION, PLATFORM)).encode())
    return digest.hexdigest()


def is_current(target: Path = TARGET) -> bool:
    stamp = target / STAMP_NAME
    return stamp.is_file() and stamp.read_text().strip() == fingerprint()


def directory_size(path: Path) -> int:
    """Bytes of every regular file below ``path``: what Lambda counts against the unzipped limit."""
    return sum(
        entry.stat().st_size for entry in path.rglob("*") if entry.is_file() and not entry.is_symlink()
    )


def _dist_info_directories(site: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for dist_info in site.glob("*.dist-info"):
        name = dist_info.name.removesuffix(".dist-info").rsplit("-", 1)[0]
        found[normalize(name)] = dist_info
    return found


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def drop_distributions(site: Path, names: Iterable[str]) -> list[str]:
    """Remove whole distributions (their files as listed in RECORD, then the dist-info)."""
    installed = _dist_info_directories(site)
    dropped: list[str] = []
    for name in sorted({normalize(n) for n in names}):
        dist_info = installed.get(name)
        if dist_info is None:
            continue
        record = dist_info / "RECORD"
        top_levels: set[Path] = set()
        if record.is_file():
            for line in record.read_text().splitlines():
                relative = line.split(",", 1)[0]
                if not relative or relative.startswith(".."):
                    continue
                file_path = site / relative
                _remove(file_path)
                top_levels.add(site / Path(relative).parts[0])
        for top_level in top_levels:
            # Only directories RECORD emptied; a namespace shared with a kept distribution survives.
            if top_level.is_dir() and not any(p.is_file() for p in top_level.rglob("*")):
                shutil.rmtree(top_level)
        _remove(dist_info)
        dropped.append(name)
    return dropped


def prune(site: Path) -> None:
    """Remove byte code, test suites, unused sub-packages, console scripts and installer bookkeeping."""
    for relative in DROPPED_PACKAGE_PATHS:
        _remove(site / relative)
    _remove(site / "bin")
    for top_level in [p for p in site.iterdir() if p.is_dir()]:
        if top_level.name.endswith(".dist-info"):
            for name in PRUNED_DIST_INFO_FILES:
                _remove(top_level / name)
            continue
        # Deepest first, so a pruned directory is never walked after removal.
        for directory in sorted(top_level.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if directory.is_dir() and directory.name in PRUNED_DIRECTORY_NAMES:
                shutil.rmtree(directory)
        if top_level.name == "__pycache__":
            shutil.rmtree(top_level)
    for compiled in [p for p in site.rglob("*") if p.suffix in PRUNED_SUFFIXES]:
        compiled.unlink()


def uv_binary() -> str:
    """The uv that installed the project (beside this interpreter), else $UV, else the PATH's."""
    beside = Path(sys.executable).with_name("uv")
    found = os.environ.get("UV") or (str(beside) if beside.is_file() else shutil.which("uv"))
    if not found:
        raise SystemExit("uv not found: run `make install` first (uv comes from uv.lock)")
    return found


def locked_install(destination: Path, requirements: Path = REQUIREMENTS) -> None:
    """Install exactly the pinned, hashed requirements for the Lambda platform: from uv's cache when it
    holds them all (no network), else from the registry."""
    command = [
        uv_binary(),
        "pip",
        "install",
        "--quiet",
        "--target",
        str(destination),
        "--python-platform",
        PLATFORM,
        "--python-version",
        PYTHON_VERSION,
        "--only-binary",
        ":all:",
        # requirements.txt is the lock's whole closure: nothing may be resolved anew.
        "--no-deps",
        "--require-hashes",
        "--no-compile",
        "--requirement",
        str(requirements),
    ]
    cached = subprocess.run([*command, "--offline"], check=False, capture_output=True)
    if cached.returncode != 0:
        _remove(destination)
        subprocess.run(command, check=True)


def check_size(size_bytes: int, limit_bytes: int = UNZIPPED_LIMIT_BYTES) -> None:
    if size_bytes > limit_bytes:
        raise SystemExit(
            f"dependency layer is {size_bytes / 2**20:.1f} MiB unzipped, over Lambda's "
            f"{limit_bytes / 2**20:.0f} MiB limit; trim it (see DROPPED_DISTRIBUTIONS)"
        )


def build(force: bool = False, target: Path = TARGET) -> BuildResult:
    """Build the layer into ``target`` unless an up-to-date build is already there."""
    if not force and is_current(target):
        return BuildResult(target, directory_size(target), rebuilt=False)
    staging = target.with_name(target.name + ".partial")
    _remove(staging)
    locked_install(staging)
    drop_distributions(staging, DROPPED_DISTRIBUTIONS)
    prune(staging)
    size = directory_size(staging)
    check_size(size)
    (staging / STAMP_NAME).write_text(fingerprint() + "\n")
    # Swap in the finished tree only once it is complete, so an interrupted build is never mistaken for
    # a good one.
    _remove(target)
    staging.rename(target)
    return BuildResult(target, size, rebuilt=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--force", action="store_true", help="rebuild even if the stamp is current")
    parser.add_argument("--check", action="store_true", help="only measure the existing build")
    args = parser.parse_args(argv)
    if args.check:
        if not TARGET.is_dir():
            print(f"{TARGET} does not exist; run without --check to build it", file=sys.stderr)
            return 1
        result = BuildResult(TARGET, directory_size(TARGET), rebuilt=False)
        check_size(result.size_bytes)
    else:
        result = build(force=args.force)
    state = "built" if result.rebuilt else "up to date"
    print(
        f"dependency layer {state}: {result.path} is {result.size_bytes / 2**20:.1f} MiB unzipped "
        f"(limit {UNZIPPED_LIMIT_BYTES / 2**20:.0f} MiB for function + layers)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
