"""The store is one documented composition: each method has exactly one owner, named in
``store/mysql.py``'s docstring, so a reader finds where a store method lives without the MRO."""

from __future__ import annotations

import re

from consolidator.store import mysql
from consolidator.store.connection import Connection
from consolidator.store.mysql import MySQLStore


def _parts() -> list[type]:
    return [base for base in MySQLStore.__mro__[1:] if issubclass(base, Connection) and base is not Connection]


def _public(part: type) -> set[str]:
    return {name for name in vars(part) if not name.startswith("_")}


def _documented() -> dict[str, tuple[str, set[str]]]:
    """``{part: (module file, methods)}`` from the docstring's list (continuation lines joined)."""
    text = re.sub(r",\n\s+", ", ", mysql.__doc__)
    return {m[1]: (m[2], set(m[3].split(", ")))
            for m in re.finditer(r"^- ``(\w+)`` \((\w+\.py)\): (.+)$", text, re.MULTILINE)}


def test_every_method_has_one_owner():
    owners: dict[str, list[str]] = {}
    for part in [*_parts(), Connection]:
        for name in vars(part):
            if not name.startswith("__"):
                owners.setdefault(name, []).append(part.__name__)
    assert {name: parts for name, parts in owners.items() if len(parts) > 1} == {}


def test_the_docstring_names_each_part_its_module_and_its_methods():
    documented = _documented()
    assert list(documented) == [part.__name__ for part in _parts()]
    for part in _parts():
        module_file, methods = documented[part.__name__]
        assert part.__module__ == f"consolidator.store.{module_file.removesuffix('.py')}"
        assert methods == _public(part), part.__name__


def test_expiry_is_not_in_the_limits_module():
    from consolidator.store import limits

    assert not {"claim_expired", "load_expiry", "mark_expired"} & _public(limits.LimitStore)
