"""Stopping ``consolidator spark stream`` cleanly on SIGTERM or Ctrl-C (SIGINT).

Guarantees: a signal never interrupts a micro-batch. The first SIGTERM or SIGINT asks the query
to stop; the micro-batch in progress (if any) runs to its end, its batches published and its
offsets committed to the checkpoint, then the query stops, and :func:`stop_line` names the
offsets it stopped at (the next run resumes after them). A second signal while waiting stops
the query at once (the micro-batch is then replayed from the checkpoint by the next run, as
after a crash). When micro-batches run back to back (each takes longer than the trigger
interval), the stop can fall on the planning of the next one: nothing of it was published or
committed, the next run plans it again, and Hadoop may log the interrupted checkpoint write. Without these handlers, PySpark's own SIGINT handler cancels every running job
(a ``FOREACH_BATCH_USER_FUNCTION_ERROR`` and pages of JVM traces) and SIGTERM ends the Python
process under the running batch.
"""

from __future__ import annotations

import json
import signal
import time

POLL_S = 0.5


class SignalStop:
    """Catches SIGTERM and SIGINT from :meth:`install` until :meth:`restore`. Install it before
    Spark starts (a signal during start-up then stops the query as soon as it runs) and again
    once the session is built (PySpark's SparkContext takes SIGINT for itself)."""

    def __init__(self) -> None:
        self.caught: list[str] = []
        self._previous: dict[int, object] = {}

    def _on_signal(self, number, _frame) -> None:
        self.caught.append(signal.Signals(number).name)

    def install(self) -> None:
        for number in (signal.SIGINT, signal.SIGTERM):
            previous = signal.signal(number, self._on_signal)
            self._previous.setdefault(number, previous)

    def restore(self) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous.clear()

    def run(self, query, poll_s: float = POLL_S) -> str | None:
        """Wait for ``query`` to end; on the first signal, stop it after its current micro-batch
        (on a second one, at once). Returns the signal's name, or None when the query ended by
        itself (its error, if any, is raised by ``awaitTermination``)."""
        while not self.caught:
            if query.awaitTermination(poll_s):
                return None
        while len(self.caught) == 1 and query.isActive and query.status.get("isTriggerActive"):
            time.sleep(0.02)  # the micro-batch in progress ends first
        query.stop()
        return self.caught[0]


def _offsets(end: object) -> str:
    """A source's end offsets as compact JSON (Spark gives Kafka's and the file source's as a
    JSON string: {"orders": {"0": 42}}, {"logOffset": 3})."""
    if isinstance(end, str):
        try:
            end = json.loads(end)
        except ValueError:
            return end
    return json.dumps(end, sort_keys=True)


def stop_line(query, signal_name: str, source: str) -> str:
    """One line: why the stream stopped, its last micro-batch and the offsets it stopped at, named
    by ``source`` (``topic orders``, ``files in DIR``: Spark's own description of a Python data
    source is a JVM object's name, ``...PythonMicroBatchStream...@721e42bc``)."""
    progress = query.lastProgress
    if not progress:
        return f"stream stopped ({signal_name}) before its first micro-batch: nothing read"
    offsets = "; ".join(f"{source}: {_offsets(read.get('endOffset'))}" for read in progress.get("sources", []))
    return (f"stream stopped ({signal_name}) after micro-batch {progress.get('batchId')}, offsets {offsets}"
            " (committed to the checkpoint: the next run resumes after them)")
