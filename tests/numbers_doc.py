"""The worked examples of docs/guide/events.md, "Numbers", read from the page itself, so the tests run
what the page says and cannot drift from it: shared by the Lambda-path and both-engine tests
(``tests/integration/test_numbers_doc.py``) and the Spark replay's (``tests/spark``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from consolidator.rules.events import FieldNames, KafkaRecord
from consolidator.rules.shape import Shape, parse_outputs

DOC = Path(__file__).resolve().parents[1] / "docs" / "guide" / "events.md"
SPEC = '[{"name": "total", "op": "sum", "path": "v"}]'
SHAPE = Shape(parse_outputs(SPEC))
NAMES = FieldNames(group_key="tenant", item_id="user", shape=SHAPE)
_CODE = re.compile(r"`([^`]*)`")
_TOTAL = re.compile(rb'"total":([^,}]*)')


@dataclass(frozen=True)
class Example:
    """One row of the table: the literals of ``v``, in order, and either the ``total`` of each
    batch as published (``totals``) or the poison reason of the events (``poison``)."""

    literals: tuple[str, ...]
    totals: tuple[str, ...] = ()
    poison: str | None = None

    def __str__(self) -> str:
        return ", ".join(self.literals)

    def records(self, group: str, topic: str = "events", partition: int = 0, first_offset: int = 0,
                timestamp_ms: int = 0) -> list[KafkaRecord]:
        """The example's events as records of ``group``, one item each, the literal as written."""
        return [KafkaRecord(topic, partition, first_offset + i, timestamp_ms, group.encode(),
                            b'{"tenant": "%b", "user": "u%d", "v": %b}' % (group.encode(), i, literal.encode()))
                for i, literal in enumerate(self.literals)]


def examples() -> list[Example]:
    """The rows of the table under "Numbers" whose header starts with "`v` of the events"."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("### Numbers"):]
    section = section[:section.index("\n#", 1)]
    table = section[section.index("| `v` of the events"):].splitlines()
    rows = []
    for line in table[2:]:
        if not line.startswith("| "):
            break
        given, outcome = (cell.strip() for cell in line.strip().strip("|").split(" | "))
        literals = tuple(_CODE.findall(given))
        if outcome.startswith("poison"):
            rows.append(Example(literals, poison=_CODE.findall(outcome)[0]))
        else:
            rows.append(Example(literals, totals=tuple(_CODE.findall(outcome))))
    assert len(rows) >= 15, f"the Numbers table of {DOC.name} was not found whole"
    return rows


def totals(bodies: list[bytes]) -> tuple[str, ...]:
    """The ``total`` of each published body, as its bytes write it."""
    return tuple(_TOTAL.search(body).group(1).decode() for body in bodies)  # type: ignore[union-attr]
