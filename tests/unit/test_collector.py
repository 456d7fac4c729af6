"""The cyclic garbage collector is paused over a flush claim and back on after it
(``consolidator.support.collector``), whatever the claim raises; a collector the caller turned off stays off."""

from __future__ import annotations

import gc

import pytest

from consolidator.support.collector import collector_paused


@pytest.fixture(autouse=True)
def _collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_the_collector_is_off_inside_and_on_after():
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_the_collector_is_back_on_after_an_error():
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("claim failed")
    assert gc.isenabled()


def test_a_collector_turned_off_by_the_caller_stays_off():
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()
