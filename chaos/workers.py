"""Child processes that run the real Lambda handlers, one invocation per line on stdin.

``python -m chaos.workers ingest|flush|acks REPO``: each stdin line is one invocation (an MSK
event, ``{"timeout_ms": N}`` for a scheduled flush, an SQS event of acks or the acks sweep's
scheduled event); each answer is one JSON line on the original stdout. The handlers' own logs and metrics go to stderr-side files, never into the protocol.

``python -m chaos.workers worker REPO``: ``consolidator worker`` itself (no protocol: its JSON log
lines on stdout), with the sink's fault hooks installed.

Fault hooks the parent sets in the environment (the handlers themselves are unchanged):
- ``CHAOS_CRASH_AFTER_PUBLISH=p``: after the sink confirmed a publish, SIGKILL this process
  with probability p (a flusher dying between publish and mark, an acker dying right after it
  published a completion);
- ``CHAOS_SINK_DOWN=path``: while that file exists, every publish fails (a sink outage).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
from pathlib import Path


def _protocol_stream():
    """Keep the real stdout for answers; send fd 1 (Powertools logs, metrics) to stderr."""
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    return answers


def _install_sink_faults() -> None:
    from consolidator import sinks

    crash_p = float(os.environ.get("CHAOS_CRASH_AFTER_PUBLISH", "0"))
    down_flag = os.environ.get("CHAOS_SINK_DOWN")
    rng = random.Random(int(os.environ.get("CHAOS_SEED", "0")) * 7919 + os.getpid())
    real_factory = sinks.sink_from_url

    class FaultySink:
        def __init__(self, inner) -> None:
            self.inner = inner

        def publish(self, batches):
            if down_flag and os.path.exists(down_flag):
                return {i: "chaos: sink unavailable" for i in range(len(batches))}
            failed = self.inner.publish(batches)
            if crash_p and not failed and rng.random() < crash_p:
                os.kill(os.getpid(), signal.SIGKILL)
            return failed

        def close(self) -> None:
            self.inner.close()

        def __getattr__(self, name: str):  # limits and anything else the sink protocol grows
            return getattr(self.inner, name)

    sinks.sink_from_url = lambda url, **options: FaultySink(real_factory(url, **options))


def main(kind: str, repo: Path) -> None:
    from consolidator.demo.lambda_context import LocalLambdaContext
    from consolidator.demo.runner import load_handler

    answers = _protocol_stream()
    if kind in ("flush", "acks"):  # the batch sink, the completion sink
        _install_sink_faults()
    module = load_handler(repo / "functions" / kind / "handler.py", f"chaos_{kind}_handler")
    answers.write(json.dumps({"ready": os.getpid()}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        if kind in ("ingest", "acks"):
            result = module.handler(request, LocalLambdaContext(function_name=f"chaos-{kind}"))
        else:
            context = LocalLambdaContext(function_name="chaos-flush", timeout_ms=int(request["timeout_ms"]))
            result = module.handler({"source": "aws.events", "detail-type": "Scheduled Event"}, context)
        answers.write(json.dumps(result) + "\n")


def worker() -> None:
    """The long-running worker, as ``consolidator worker`` runs it, with the sink's fault hooks."""
    from consolidator.cli import app

    _install_sink_faults()
    app(["worker"], prog_name="consolidator")


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        worker()
    else:
        main(sys.argv[1], Path(sys.argv[2]))
