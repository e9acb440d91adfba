"""A Lambda context for handler tests: what Powertools reads of one."""

from __future__ import annotations


class Context:
    function_name = "termination"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:termination"
    aws_request_id = "request"

    def get_remaining_time_in_millis(self) -> int:
        return 300_000
