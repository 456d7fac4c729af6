"""Flink's SQL session window over records in JSON lines: the peer baseline of the Spark benchmarks.

    .tools/flink/bin/python bench/flink_session.py --input DIR --warmup DIR --gap-ms 300000

Runs in Flink's own venv (``scripts/setup.sh flink``), not the project's. The query is Nexmark
q11's shape: events per group key per session, the group key read from the record's JSON value,
event time from the record's timestamp, streaming mode (Flink's batch mode has no session
windows), the ``blackhole`` sink. The input is bounded: at its end Flink moves the watermark to
the end of time, which closes every session. The ``--warmup`` input runs first in the same JVM,
unmeasured; then the measured run; then, unmeasured, a count of the sessions so that the caller
can check that Flink and Spark saw the same sessions. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from proctree import tree_cpu_seconds
from pyflink.table import EnvironmentSettings, TableEnvironment


def _interval(ms: int) -> str:
    """Flink SQL rejects ``INTERVAL '300' SECOND`` (leading precision 2): the largest whole unit."""
    for unit, size in (("DAY", 86_400_000), ("HOUR", 3_600_000), ("MINUTE", 60_000), ("SECOND", 1_000)):
        if ms % size == 0 and ms // size < 100:
            return f"INTERVAL '{ms // size}' {unit}"
    raise ValueError(f"{ms} ms is not a whole number under 100 of days, hours, minutes or seconds")


def session_query(env: TableEnvironment, name: str, path: str, gap_ms: int, watermark_ms: int) -> str:
    """Declares table ``name`` over the JSON lines at ``path`` and returns the session query."""
    env.execute_sql(f"""
        CREATE TEMPORARY TABLE {name} (
          `topic` STRING, `partition` INT, `offset` BIGINT, `timestamp` BIGINT, `key` STRING, `value` STRING,
          ts AS TO_TIMESTAMP_LTZ(`timestamp`, 3),
          WATERMARK FOR ts AS ts - {_interval(watermark_ms)}
        ) WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'json')""")
    gap = _interval(gap_ms)
    return (f"SELECT JSON_VALUE(`value`, '$.location_id') AS group_key, SESSION_START(ts, {gap}) AS started,"
            f" COUNT(*) AS events FROM {name} GROUP BY JSON_VALUE(`value`, '$.location_id'), SESSION(ts, {gap})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True)
    parser.add_argument("--warmup", required=True)
    parser.add_argument("--gap-ms", type=int, required=True)
    parser.add_argument("--watermark-ms", type=int, default=60_000, help="bounded out-of-orderness")
    parser.add_argument("--parallelism", type=int, default=2)
    args = parser.parse_args()
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    env.get_config().set("parallelism.default", str(args.parallelism))
    env.execute_sql("CREATE TEMPORARY TABLE sink (group_key STRING, started TIMESTAMP_LTZ(3), events BIGINT)"
                    " WITH ('connector' = 'blackhole')")
    warm = session_query(env, "warm", args.warmup, args.gap_ms, args.watermark_ms)
    env.execute_sql(f"INSERT INTO sink {warm}").wait()
    query = session_query(env, "records", args.input, args.gap_ms, args.watermark_ms)
    cpu, started = tree_cpu_seconds(), time.perf_counter()
    env.execute_sql(f"INSERT INTO sink {query}").wait()
    seconds, cpu_seconds = time.perf_counter() - started, tree_cpu_seconds() - cpu
    # unmeasured: the sessions, written by Flink as CSV (a collected streaming COUNT(*) would be a
    # changelog of an update per session)
    with tempfile.TemporaryDirectory(prefix="flink-sessions-") as out:
        env.execute_sql(f"CREATE TEMPORARY TABLE counted (group_key STRING, started TIMESTAMP_LTZ(3), events BIGINT)"
                        f" WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'csv')")
        env.execute_sql(f"INSERT INTO counted {query}").wait()
        rows = [line.rsplit(",", 1) for path in Path(out).rglob("*") if path.is_file()
                and not path.name.startswith((".", "_")) for line in path.read_text().splitlines() if line]
    sessions, events = len(rows), sum(int(events) for _, events in rows)
    print(json.dumps({"seconds": round(seconds, 3), "cpu_seconds": round(cpu_seconds, 2), "sessions": sessions,
                      "events": events, "parallelism": args.parallelism}))


if __name__ == "__main__":
    main()
