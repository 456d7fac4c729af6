"""One local SparkSession for the whole test session (tests marked ``spark`` use it)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

pytest.importorskip("pyspark")



@pytest.fixture(scope="session")
def spark(tmp_path_factory) -> Iterator:
    from consolidator.spark.session import build_session

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = build_session(
        "consolidator-tests", master="local[2]",
        extra={"spark.sql.warehouse.dir": str(tmp_path_factory.mktemp("warehouse")),
               "spark.driver.memory": "1g"},
    )
    yield session
    session.stop()
