"""JSON Schema values: the value itself, once it is valid JSON that its schema accepts, with
the schema held to what can be evaluated safely.

Guarantees, for any schema the registry serves and any value:

- nothing is ever fetched: a ``$ref`` (``$dynamicRef``, ``$recursiveRef``) must point inside the
  schema (``#...``); a schema with another (``http://...``, ``file:...``, a relative file name)
  cannot be read, and a local one that leads nowhere makes the value ``undecodable_value``
  poison, as the validator runs with a registry that holds nothing but the schema itself;
- ``pattern`` and ``patternProperties`` run on RE2 (google-re2), whose matching time is linear
  in the text: a catastrophic pattern such as ``^(a+)+$`` costs microseconds. A pattern RE2
  cannot run (lookaround, backreferences), or larger than
  :data:`~consolidator.sources.formats.limits.MAX_PATTERN_PROGRAM_SIZE`, makes the values that reach it
  poison; ``unevaluatedProperties`` next to ``patternProperties`` (which jsonschema evaluates
  with Python's backtracking engine) makes the schema unreadable;
- one value's validation evaluates at most
  :data:`~consolidator.sources.formats.limits.JSON_SCHEMA_STEPS` keywords plus
  :data:`~consolidator.sources.formats.limits.JSON_SCHEMA_STEPS_PER_BYTE` per byte of the value, so a
  schema whose references multiply its work is poison for the value, not an endless loop;
- it raises nothing but poison.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from consolidator.rules.events import PoisonReason
from consolidator.sources.formats.base import poison
from consolidator.sources.formats.limits import (
    JSON_SCHEMA_STEPS,
    JSON_SCHEMA_STEPS_PER_BYTE,
    MAX_PATTERN_MEMORY_BYTES,
    MAX_PATTERN_PROGRAM_SIZE,
)

_REFERENCES = ("$ref", "$dynamicRef", "$recursiveRef")
# the keyword budget of the validation running in this context
_STEPS: contextvars.ContextVar[list[int]] = contextvars.ContextVar("json_schema_steps")


class _TooMuchWork(Exception):
    pass


class _PatternRefused(Exception):
    pass


def _walk(schema: Any) -> Iterator[dict]:
    """Every object in ``schema``, without recursion (a schema may nest ~1000 levels)."""
    pending = [schema]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            yield node
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)


def _unreadable(schema: Any) -> str | None:
    """Why ``schema`` cannot be evaluated safely, or None."""
    keywords: set[str] = set()
    for node in _walk(schema):
        keywords.update(node)
        for keyword in _REFERENCES:
            target = node.get(keyword)
            if isinstance(target, str) and not target.startswith("#"):
                return (f"{keyword} {target[:200]!r} points outside the schema: only references within it (#...)"
                        " are followed, nothing is fetched")
    if {"unevaluatedProperties", "patternProperties"} <= keywords:
        return ("unevaluatedProperties next to patternProperties is not evaluated (its patterns would run on a"
                " backtracking engine)")
    return None


class _Patterns:
    """``pattern`` and ``patternProperties`` on RE2, each pattern compiled once."""

    def __init__(self) -> None:
        import re2

        self.re2 = re2
        self.options = re2.Options()
        self.options.log_errors = False
        self.options.max_mem = MAX_PATTERN_MEMORY_BYTES
        self.compiled: dict[str, Any] = {}

    def search(self, pattern: str, text: str) -> bool:
        compiled = self.compiled.get(pattern)
        if compiled is None:
            compiled = self.compiled[pattern] = self._compile(pattern)
        return compiled.search(text) is not None

    def _compile(self, pattern: str) -> Any:
        try:
            compiled = self.re2.compile(pattern, self.options)
        except self.re2.error as exc:
            reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
            raise _PatternRefused(f"pattern {pattern[:200]!r} cannot run in linear time (RE2: {reason})") from None
        if compiled.programsize > MAX_PATTERN_PROGRAM_SIZE:
            raise _PatternRefused(f"pattern {pattern[:200]!r} compiles to {compiled.programsize} instructions,"
                                  f" more than {MAX_PATTERN_PROGRAM_SIZE}")
        return compiled

    # jsonschema keyword functions: (validator, keyword value, instance, schema) -> errors

    def pattern(self, validator, pattern, instance, schema):
        from jsonschema.exceptions import ValidationError

        if validator.is_type(instance, "string") and not self.search(pattern, instance):
            yield ValidationError(f"{instance[:200]!r} does not match {pattern[:200]!r}")

    def pattern_properties(self, validator, patterns, instance, schema):
        if not validator.is_type(instance, "object"):
            return
        for pattern, subschema in patterns.items():
            for name, value in instance.items():
                if self.search(pattern, name):
                    yield from validator.descend(value, subschema, path=name, schema_path=pattern)

    def additional_properties(self, validator, additional, instance, schema):
        from jsonschema.exceptions import ValidationError

        if not validator.is_type(instance, "object"):
            return
        declared = schema.get("properties", {})
        patterns = list(schema.get("patternProperties", {}))
        extras = [name for name in instance
                  if name not in declared and not any(self.search(p, name) for p in patterns)]
        if validator.is_type(additional, "object"):
            for name in extras:
                yield from validator.descend(instance[name], additional, path=name)
        elif not additional and extras:
            names = ", ".join(repr(name[:100]) for name in extras[:5])
            yield ValidationError(f"additional properties are not allowed ({names}"
                                  f"{' ...' if len(extras) > 5 else ''})")


def _counted(keyword: Callable) -> Callable:
    def evaluate(validator, value, instance, schema):
        left = _STEPS.get()
        left[0] -= 1
        if left[0] < 0:
            raise _TooMuchWork
        return keyword(validator, value, instance, schema)

    return evaluate


def json_schema_reader(schema_id: str, text: str) -> Callable[[bytes], bytes]:
    """``read(payload)``: ``payload`` itself once its schema (``text``) accepts it. Poison when
    the schema cannot be read or evaluated safely, or does not accept the value."""
    import jsonschema
    import referencing

    try:
        schema = json.loads(text)
        why = _unreadable(schema)
        if why is not None:
            raise poison(PoisonReason.UNDECODABLE_VALUE, f"the JSON Schema cannot be read: {why}", schema_id)
        base = jsonschema.validators.validator_for(schema)
        base.check_schema(schema)
    except RecursionError:
        raise poison(PoisonReason.UNDECODABLE_VALUE, "the JSON Schema nests too deeply to be read", schema_id) from None
    except (ValueError, TypeError, jsonschema.SchemaError) as exc:
        raise poison(PoisonReason.UNDECODABLE_VALUE, f"the JSON Schema cannot be read: {exc}", schema_id) from None
    patterns = _Patterns()
    keywords = {name: _counted(keyword) for name, keyword in base.VALIDATORS.items()}
    for name, keyword in (("pattern", patterns.pattern), ("patternProperties", patterns.pattern_properties),
                          ("additionalProperties", patterns.additional_properties)):
        if name in keywords:
            keywords[name] = _counted(keyword)
    # the schema is the only resource: a reference that leaves it is unresolvable, never fetched
    validator = jsonschema.validators.extend(base, keywords)(schema, registry=referencing.Registry())
    unresolvable = referencing.exceptions.Unresolvable

    def read(payload: bytes) -> bytes:
        try:
            document = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise poison(PoisonReason.UNDECODABLE_VALUE, f"value is not JSON: {exc}", schema_id) from None
        steps = JSON_SCHEMA_STEPS + JSON_SCHEMA_STEPS_PER_BYTE * len(payload)
        budget = _STEPS.set([steps])
        try:
            error = jsonschema.exceptions.best_match(validator.iter_errors(document))
        except _TooMuchWork:
            raise poison(PoisonReason.UNDECODABLE_VALUE, f"validating the value against its JSON Schema takes more"
                         f" than {steps} keyword evaluations", schema_id) from None
        except _PatternRefused as exc:
            raise poison(PoisonReason.UNDECODABLE_VALUE, f"the JSON Schema cannot be evaluated: {exc}",
                         schema_id) from None
        except unresolvable as exc:
            raise poison(PoisonReason.UNDECODABLE_VALUE, f"the JSON Schema has a reference that leads nowhere: {exc}",
                         schema_id) from None
        except RecursionError:
            raise poison(PoisonReason.UNDECODABLE_VALUE, "the JSON Schema's references loop without end",
                         schema_id) from None
        except (ArithmeticError, ValueError, TypeError) as exc:  # e.g. multipleOf on a huge number
            raise poison(PoisonReason.UNDECODABLE_VALUE, f"the JSON Schema cannot be evaluated on this value:"
                         f" {type(exc).__name__}: {exc}", schema_id) from None
        finally:
            _STEPS.reset(budget)
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(the document)"
            raise poison(PoisonReason.UNDECODABLE_VALUE,
                         f"value does not match its JSON Schema at {where}: {error.message}", schema_id)
        return payload

    return read
