"""Dead-letter redrive of poison events: fixed entries go back through the real ingest service.

Guarantees:
- an entry is re-ingested under its ORIGINAL source position, exactly once: its position is
  recorded in ``applied_positions`` in the transaction that stores it (the high-water marks
  already cover it), so running the same redrive twice changes nothing;
- an entry that is still poison is NOT re-ingested (it would only be dead-lettered again);
  it is reported with its reason;
- an entry whose value was truncated in the dead letter is refused unless a fixed value is
  given, because the stored bytes are not the original event.

A fixed entry is a dead-letter line (``kind: poison``) where the operator either edited
``value_b64`` or added ``value`` (a JSON document, or a string taken as the raw UTF-8 value).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from consolidator.rules.events import KafkaRecord, PoisonEvent
from consolidator.services.ingest import IngestService
from consolidator.sources.formats import RegistryUnavailable

CHUNK = 500  # records per ingest call: bounds one multi-row statement


class BadEntry(ValueError):
    """A dead-letter entry that cannot be turned back into a Kafka record."""


@dataclass
class RedriveReport:
    read: int = 0
    skipped: int = 0  # entries that are not poison events (e.g. dead batches)
    stored: int = 0
    coalesced: int = 0
    replayed: int = 0  # already stored by an earlier redrive: no-op
    still_poison: list[dict] = field(default_factory=list)
    failed: list[dict] = field(default_factory=list)  # ingest failures (retry the redrive)

    @property
    def ok(self) -> bool:
        return not self.still_poison and not self.failed


def record_from_entry(entry: dict) -> KafkaRecord:
    """The Kafka record a poison dead-letter entry describes, with the fixed value if given."""
    try:
        source = entry["source"]
        topic, partition, offset = source["topic"], int(source["partition"]), int(source["offset"])
        timestamp_ms = int(entry["timestamp_ms"])
    except (KeyError, TypeError, ValueError) as exc:
        raise BadEntry(f"entry lacks source/timestamp_ms: {exc}") from None
    if "value" in entry:
        fixed = entry["value"]
        value = fixed.encode() if isinstance(fixed, str) else json.dumps(fixed).encode()
    else:
        if entry.get("value_truncated"):
            raise BadEntry("value was truncated in the dead letter; add the fixed 'value' to the entry")
        value = base64.b64decode(entry.get("value_b64") or "")
    key = None if entry.get("key_b64") is None else base64.b64decode(entry["key_b64"])
    return KafkaRecord(topic, partition, offset, timestamp_ms, key, value)


def redrive_poison(entries: Iterable[dict], ingest: IngestService) -> RedriveReport:
    """Re-ingest every poison entry whose value is now valid through ``ingest``."""
    report = RedriveReport()
    records: list[KafkaRecord] = []
    for entry in entries:
        report.read += 1
        if entry.get("kind") != "poison":
            report.skipped += 1
            continue
        source = entry.get("source")
        try:
            record = record_from_entry(entry)
            ingest.decode(record)
        except BadEntry as exc:
            report.still_poison.append({"source": source, "reason": "bad_entry", "detail": str(exc)})
            continue
        except PoisonEvent as exc:
            report.still_poison.append({"source": source, "reason": str(exc.reason), "detail": exc.detail})
            continue
        except RegistryUnavailable:
            records.append(record)  # still poison or not is unknown yet: the redrive reports it failed
            continue
        records.append(record)
    for start in range(0, len(records), CHUNK):
        outcome = ingest.redrive(records[start : start + CHUNK])
        report.stored += outcome.stored
        report.coalesced += outcome.coalesced
        report.replayed += outcome.replayed
        report.failed.extend(p.as_dict() for p in outcome.failed)
    return report
