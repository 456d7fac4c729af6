"""A hard bound on each test, setup to teardown (a pytest plugin, loaded by conftest.py).
pytest-timeout stops its timer once a test has failed, so a teardown that hangs after a failure
(a DROP behind a lock a test leaked, a Kafka client's close in C) would hang the whole run until
CI kills it, with nothing printed. After ``TEST_HARD_BOUND_SECONDS`` (900 by default, well past
pytest-timeout's 600) this names the test, prints every thread's stack to the real stderr and
ends the run with exit code 1."""

from __future__ import annotations

import faulthandler
import os
import sys
import threading

import pytest

BOUND_S = float(os.environ.get("TEST_HARD_BOUND_SECONDS", "900"))


def _dump_and_exit(item: pytest.Item) -> None:
    capture = item.config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.suspend_global_capture(in_=True)  # the real stderr, not the test's captured one
    sys.stderr.write(f"\n{item.nodeid}: still running after {BOUND_S:g} s (setup to teardown);"
                     " ending the run. Every thread's stack:\n")
    sys.stderr.flush()
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()
    os._exit(1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item):
    timer = threading.Timer(BOUND_S, _dump_and_exit, args=(item,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
