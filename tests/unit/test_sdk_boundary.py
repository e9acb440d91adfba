"""Only the adapters (and runtime.py, which wires them) know the AWS SDK: the rest of the core catches the
adapters' domain errors, never botocore's."""

from __future__ import annotations

import re
from pathlib import Path

import serverless_karpenter

PACKAGE = Path(serverless_karpenter.__file__).parent
SDK = re.compile(r"botocore|boto3")


def test_the_aws_sdk_is_named_only_in_the_adapters_and_the_runtime_wiring() -> None:
    outside = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] != "adapters" and path.name != "runtime.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if SDK.search(line)
    ]
    assert not outside, "\n".join(outside)
    # The walk saw the package (an empty walk would pass anything).
    assert (PACKAGE / "adapters" / "providers" / "errors.py").is_file()
