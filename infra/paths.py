"""Where the stack finds its assets: resolved from this file, so synth works from any working directory."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS_DIR = REPO_ROOT / "functions"
CORE_LAYER_DIR = REPO_ROOT / "layers" / "core"
DEPENDENCY_LAYER_DIR = REPO_ROOT / "layers" / "dependencies"
DEPENDENCY_LAYER_BUILD_SCRIPT = DEPENDENCY_LAYER_DIR / "build.py"
DEPLOY_DIR = REPO_ROOT / "deploy"
