"""A Lambda context for running the real handlers outside Lambda (tests, the local demo)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field


@dataclass
class LocalLambdaContext:
    """Quacks like ``awslambdaric``'s context; the deadline is ``timeout_ms`` after creation."""

    function_name: str = "consolidator-local"
    timeout_ms: int = 60_000
    memory_limit_in_mb: int = 512
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    _deadline: float = field(init=False)

    def __post_init__(self) -> None:
        self._deadline = time.monotonic() + self.timeout_ms / 1000
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:000000000000:function:{self.function_name}"
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = "local"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))
