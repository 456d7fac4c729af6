"""Sessions use the cores they are given: shuffle partitions follow the master."""

from __future__ import annotations

import os

import pytest

from consolidator.spark.session import (
    SHUFFLE_PARTITIONS,
    STREAM_SETTINGS,
    local_cores,
    session_settings,
)


@pytest.mark.parametrize(("master", "cores"), [
    ("local", 1), ("local[1]", 1), ("local[3]", 3), ("local[8,2]", 8), ("local[*]", os.cpu_count()),
    ("yarn", None), ("spark://host:7077", None), ("local[x]", None),
])
def test_local_cores(master, cores):
    assert local_cores(master) == cores


def test_shuffle_partitions_follow_the_master_and_an_explicit_setting_wins():
    assert session_settings("local[3]")[SHUFFLE_PARTITIONS] == "3"
    assert session_settings("local[5]")["spark.default.parallelism"] == "5"
    assert session_settings("local[3]", {SHUFFLE_PARTITIONS: "7"})[SHUFFLE_PARTITIONS] == "7"
    # on a cluster the session sets it from the default parallelism once it runs (build_session)
    assert SHUFFLE_PARTITIONS not in session_settings(None)


def test_progress_bar_only_when_asked():
    assert session_settings("local[2]", progress=True)["spark.ui.showConsoleProgress"] == "true"
    assert session_settings("local[2]")["spark.ui.showConsoleProgress"] == "false"


def test_the_streaming_session_takes_larger_arrow_batches_and_an_explicit_setting_wins():
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    assert STREAM_SETTINGS[key] == "50000"
    assert session_settings("local[2]", stream=True)[key] == "50000"
    assert session_settings(None, stream=True)[key] == "50000"  # on a cluster too
    assert key not in session_settings("local[2]")  # the replay keeps Spark's default
    assert session_settings("local[2]", {key: "1000"}, stream=True)[key] == "1000"
