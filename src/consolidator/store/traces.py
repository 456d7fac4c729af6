"""The trace contexts a batch's members keep (schema 12): read at every publish (a message carries
its batch's ``traceparent``, a function of them)."""

from __future__ import annotations

from collections.abc import Sequence

from consolidator.rules.tracecontext import TraceContext
from consolidator.store.connection import Connection
from consolidator.store.members import keys_table


class TraceStore(Connection):
    def member_trace_contexts(self, batch_ids: Sequence[str]) -> dict[str, list[TraceContext]]:
        """The trace contexts of the member rows of ``batch_ids`` that have one (their newest
        event's), in batch order; a batch without any is left out. One statement, by primary
        key from the batch rows."""
        if not batch_ids:
            return {}
        marks = ",".join(["%s"] * len(batch_ids))
        with self.transaction() as cur:
            cur.execute(
                "SELECT b.batch_id, r.trace_parent, r.trace_state FROM batches b JOIN"
                f" {keys_table('b')} STRAIGHT_JOIN buffer_rows r ON r.id = k.id AND r.bucket = k.bucket"
                f" WHERE b.batch_id IN ({marks}) AND r.trace_parent IS NOT NULL"
                " ORDER BY b.batch_id, r.first_seen_ms, r.pos_key",
                tuple(batch_ids),
            )
            found: dict[str, list[TraceContext]] = {}
            for row in cur.fetchall():
                found.setdefault(row["batch_id"], []).append(TraceContext(row["trace_parent"], row["trace_state"]))
        return found
