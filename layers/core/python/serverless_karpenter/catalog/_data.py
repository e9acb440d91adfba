"""Reading the JSON files shipped in ``serverless_karpenter/data``.

They travel inside the package (and so inside the Lambda layer), because users do not have the
repository's shared data directory.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any


def read_package_json(name: str) -> Any:
    """Parse ``serverless_karpenter/data/<name>``."""
    return json.loads(resources.files("serverless_karpenter").joinpath("data", name).read_bytes())
