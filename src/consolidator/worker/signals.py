"""SIGTERM and SIGINT for the worker. While it starts (connecting to the database and Kafka),
one exits at once with code 0: nothing was fetched, so nothing is to commit. Once it runs, the
first begins the clean stop (bounded by ``worker_shutdown_seconds``); a second one exits at
once, with code 128 + the signal's number. Nothing is lost either way: records whose offsets
were not committed are delivered again, and the high-water marks make them replays."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable

log = logging.getLogger(__name__)
SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _flush_logs() -> None:
    for handler in logging.getLogger("consolidator").handlers + logging.getLogger().handlers:
        handler.flush()


def exit_while_starting() -> None:
    """Until :func:`install`: a SIGTERM or SIGINT exits with code 0 (raises ``SystemExit`` in
    the main thread, out of whatever start-up step waits)."""

    def on_signal(number: int, _frame) -> None:
        log.info("stop requested while starting; nothing fetched yet: exiting",
                 extra={"signal": signal.Signals(number).name})
        _flush_logs()
        raise SystemExit(0)

    for number in SIGNALS:
        signal.signal(number, on_signal)


def install(request_stop: Callable[[str], None]) -> None:
    """Route the first SIGTERM or SIGINT to ``request_stop``; exit at once on the next one."""
    received: list[str] = []

    def on_signal(number: int, _frame) -> None:
        name = signal.Signals(number).name
        received.append(name)
        if len(received) == 1:
            log.info("stop requested", extra={"signal": name})
            request_stop(name)
            return
        log.warning("second signal: exiting now; uncommitted records are delivered again",
                    extra={"signal": name})
        _flush_logs()
        os._exit(128 + number)

    for number in SIGNALS:
        signal.signal(number, on_signal)
