"""The cold-start benchmark's measurement, on one handler: its structure and its Lambda layout, never its
time."""

from __future__ import annotations

from benchmarks import cold_start


def test_one_handler_is_measured_in_a_fresh_lambda_like_process() -> None:
    with cold_start.lambda_tree() as tree:
        figures = cold_start.measure_handler("watcher", tree, runs=1)

    assert set(figures) == {"seconds", "samples", "cpu_seconds", "heaviest_imports"}
    assert figures["cpu_seconds"] > 0
    assert len(figures["samples"]) == 1
    assert figures["seconds"] == min(figures["samples"]) > 0
    assert figures["heaviest_imports"]
    assert all(seconds <= figures["seconds"] for seconds in figures["heaviest_imports"].values())


def test_the_layers_ship_without_bytecode_and_the_runtime_sdk_with_it() -> None:
    with cold_start.lambda_tree() as tree:
        # Our code and the dependency layer: sources only, as infra/layers.py's asset excludes leave them.
        assert (tree.core / "serverless_karpenter" / "runtime.py").is_file()
        assert (tree.dependencies / "pydantic" / "__init__.py").is_file()
        for layer in (tree.core, tree.dependencies):
            assert not any(layer.rglob("*.pyc"))
        # build.py's drops: the SDK comes from the runtime, kubernetes.aio's aiohttp not at all.
        assert not (tree.dependencies / "boto3").exists()
        assert not (tree.dependencies / "aiohttp").exists()
        assert not (tree.dependencies / "kubernetes" / "aio").exists()
        assert any((tree.runtime / "botocore").rglob("*.pyc"))
    with cold_start.lambda_tree(bytecode=True) as compiled:
        assert any((compiled.core / "serverless_karpenter").rglob("*.pyc"))


def test_the_lambda_environment_is_the_stacks() -> None:
    with cold_start.lambda_tree() as tree:
        env = cold_start.lambda_environment("interruption", tree=tree)
        # The function's code first, then the core layer, the dependencies, the runtime's SDK: as Lambda
        # orders /var/task, /opt/python and /var/runtime.
        assert env["PYTHONPATH"].split(":") == [
            str(cold_start.FUNCTIONS_DIR / "interruption"),
            str(tree.core),
            str(tree.dependencies),
            str(tree.runtime),
        ]
    assert env["POWERTOOLS_SERVICE_NAME"] == "serverless-karpenter"
    assert env["POWERTOOLS_TRACE_DISABLED"] == "true"  # the stack's default: -c tracing=true turns it on
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"  # /opt is read-only
    traced = cold_start.lambda_environment("watcher", trace_disabled=False)
    assert "POWERTOOLS_TRACE_DISABLED" not in traced
