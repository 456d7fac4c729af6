"""The demo's function logs: on stderr, each line under the service of the function that wrote it.

The demo runs the ingest and the flush handler in one process. Each handler, when imported,
copies its Powertools logger's handler onto the ``consolidator`` logger
(:func:`consolidator.support.function_logging.configure_function_logging`), so the second one imported
would label every line of the shared modules with its own service and function name. Here the
copied handlers are replaced by one :class:`FunctionLogRouter` that hands each record to the
handler (the formatter with the service, function name and cold-start keys) of the function
running in the calling thread, as :func:`as_function` marks it; a record logged outside any
function (a client's background thread) gets the demo's own label. Every handler writes to
stderr: with ``--json``, stdout holds the one summary document.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
from collections.abc import Callable

DEMO_SERVICE = "consolidator-demo"
_CURRENT: contextvars.ContextVar[str | None] = contextvars.ContextVar("consolidator_demo_function", default=None)


def as_function(name: str, handler: Callable) -> Callable:
    """``handler``, marking every record it logs (in its thread) as function ``name``'s."""

    def call(event, context):
        token = _CURRENT.set(name)
        try:
            return handler(event, context)
        finally:
            _CURRENT.reset(token)

    return call


class _DemoFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps({"level": record.levelname, "message": record.getMessage(), "service": DEMO_SERVICE,
                           "name": record.name}, default=str)


class FunctionLogRouter(logging.Handler):
    """One handler for the shared loggers: each record goes to its function's own handler."""

    def __init__(self, functions: dict) -> None:
        """``functions``: name -> the function's Powertools ``Logger``."""
        super().__init__()
        self._loggers = list(functions.values())
        self._handlers = {name: logger.registered_handler for name, logger in functions.items()}
        for handler in self._handlers.values():
            if isinstance(handler, logging.StreamHandler):
                handler.stream = sys.stderr  # not setStream: it flushes the old stream, maybe closed
        self._fallback = logging.StreamHandler(sys.stderr)
        self._fallback.setFormatter(_DemoFormatter())

    def install(self, level: int) -> None:
        """Put this router in place of the functions' handlers on every logger that has one, all
        at ``level`` (Powertools keeps a service logger's first level for the whole process)."""
        owned = set(map(id, self._handlers.values()))
        for logger in self._loggers:
            logger.setLevel(level)
        for logger in list(logging.root.manager.loggerDict.values()):
            if (isinstance(logger, logging.Logger) and logger.name.partition(".")[0] == "consolidator"
                    and any(id(h) in owned for h in logger.handlers)):
                logger.handlers = [self]
                logger.setLevel(level)

    def emit(self, record: logging.LogRecord) -> None:
        self._handlers.get(_CURRENT.get() or "", self._fallback).handle(record)
