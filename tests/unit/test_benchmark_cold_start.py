"""The cold-start benchmark's measurement, on one handler: its structure, never its time."""

from __future__ import annotations

from benchmarks import cold_start


def test_one_handler_is_measured_in_a_fresh_lambda_like_process() -> None:
    figures = cold_start.measure_handler("watcher", runs=1, trace_disabled=True)

    assert set(figures) == {"seconds", "samples", "cpu_seconds", "heaviest_imports"}
    assert figures["cpu_seconds"] > 0
    assert len(figures["samples"]) == 1
    assert figures["seconds"] == min(figures["samples"]) > 0
    assert figures["heaviest_imports"]
    assert all(seconds <= figures["seconds"] for seconds in figures["heaviest_imports"].values())


def test_the_lambda_environment_is_the_stacks() -> None:
    env = cold_start.lambda_environment("interruption")

    # The function's code first, then the core layer, as Lambda orders /var/task and /opt/python.
    assert env["PYTHONPATH"].split(":") == [
        str(cold_start.FUNCTIONS_DIR / "interruption"),
        str(cold_start.CORE_LAYER_PYTHON),
    ]
    assert env["POWERTOOLS_SERVICE_NAME"] == "serverless-karpenter"
    assert "POWERTOOLS_TRACE_DISABLED" not in env  # the stack traces
    untraced = cold_start.lambda_environment("watcher", trace_disabled=True)
    assert untraced["POWERTOOLS_TRACE_DISABLED"] == "true"


def test_importtime_output_is_parsed_to_the_handler_and_its_heaviest_imports() -> None:
    stderr = "\n".join(
        [
            "import time: self [us] | cumulative | imported package",
            "import time:       100 |        300 |     botocore.docs",
            "import time:       200 |     500000 |   boto3",
            "import time:        50 |      20000 |   typing",
            "import time:      1000 |     600000 | handler",
        ]
    )

    total, children = cold_start.parse_importtime(stderr)

    assert total == 0.6
    assert children == [("boto3", 0.5), ("typing", 0.02)]
