"""Alternate a benchmark of this checkout with the same benchmark at another git ref, in one run.

`make bench-flush-against REF=3c6f210` (``BENCH_ARGS`` go to both sides), or
``.venv/bin/python bench/against.py --ref REF bench/bench_flush.py -- [bench args]``.

The ref is checked out in a throwaway worktree (``git worktree add --detach``) and set up there
with ``make setup`` (its own ``.venv``); ``--ref-dir`` uses a checkout already set up instead.
Then, ``--rounds`` times, the benchmark runs once on each side (``--repeat 1``), the side that
goes first swapping every round, each side on a database of its own (named after this
process, the benchmark and the side; dropped at the end), and writes its JSON line to a
temporary file. The machine's load drifts between rounds alike for both sides, so the pairs compare.

Prints each round's figures, then per figure each side's median and best (the least CPU per
row, the most rows per second or the highest ratio), and one JSON line last. Under load, a
ratio's best is often one slow floor run: compare medians, and the CPU per row above all. The throwaway worktree is
removed at the end. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pymysql

from consolidator.store.mysql import ConnectionParams

HERE = Path(__file__).resolve().parent.parent
DEFAULT_URL = "mysql://root:@127.0.0.1:3306/"
KEYS = ("ratio_vs_sql_floor", "kafka_ratio_vs_sql_floor", "client_cpu_us_per_row", "file_rows_per_s",
        "sql_floor_rows_per_s", "kafka_rows_per_s")


def best(key: str, values: list[float]) -> float:
    """The best of a figure's values: the least for a cost per row, the most otherwise."""
    return min(values) if key.endswith(("_us_per_row", "_us_per_record")) else max(values)


def database_url(database: str) -> str:
    return os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL).rsplit("/", 1)[0] + "/" + database


def drop(database: str) -> None:
    """Drop a database this run's benchmarks made (its name holds this process's id)."""
    params = ConnectionParams.from_url(database_url(database))
    with pymysql.connect(host=params.host, port=params.port, user=params.user, password=params.password,
                         autocommit=True) as admin, admin.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{database}`")


def run_side(root: Path, bench: str, args: list[str], database: str, out: Path) -> dict:
    """One run of ``bench`` in the checkout at ``root`` (its own ``.venv``); its JSON line."""
    url = database_url(database)
    command = [str(root / ".venv/bin/python"), str(root / bench), "--repeat", "1", "--database-url", url,
               "--save", str(out), *args]
    subprocess.run(command, cwd=root, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bench", help="the benchmark script, relative to the checkout (e.g. bench/bench_flush.py)")
    parser.add_argument("--ref", help="the git ref to compare with (a throwaway worktree of it is set up)")
    parser.add_argument("--ref-dir", type=Path, help="a checkout of the ref already set up (make setup) instead")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each side, alternating")
    parser.add_argument("--keys", default=",".join(KEYS), help="the figures compared (keys of the JSON line)")
    parser.add_argument("bench_args", nargs=argparse.REMAINDER, help="-- then the arguments of both sides' runs")
    args = parser.parse_args()
    if (args.ref is None) == (args.ref_dir is None):
        parser.error("give one of --ref and --ref-dir")
    bench_args = args.bench_args[1:] if args.bench_args[:1] == ["--"] else args.bench_args
    keys = args.keys.split(",")
    name = f"against_{os.getpid()}_{Path(args.bench).stem}"
    with tempfile.TemporaryDirectory(prefix="against-") as tmp_name:
        tmp = Path(tmp_name)
        ref_root = args.ref_dir
        if ref_root is None:
            ref_root = tmp / "ref"
            subprocess.run(["git", "-C", str(HERE), "worktree", "add", "--detach", str(ref_root), args.ref], check=True)
        try:
            if args.ref_dir is None:
                print(f"setting up {args.ref} in {ref_root} (make setup) ...", file=sys.stderr)
                subprocess.run(["make", "setup"], cwd=ref_root, check=True, stdout=subprocess.DEVNULL)
            sides = {"here": HERE, "ref": ref_root}
            figures: dict[str, list[dict]] = {"here": [], "ref": []}
            for round_ in range(args.rounds):
                for side in (("here", "ref") if round_ % 2 == 0 else ("ref", "here")):
                    result = run_side(sides[side], args.bench, bench_args, f"{name}_{side}", tmp / f"{side}.json")
                    figures[side].append(result)
                    shown = ", ".join(f"{k} {result[k]}" for k in keys if k in result)
                    print(f"round {round_ + 1} {side:>4}: {shown}", file=sys.stderr)
        finally:
            for side in ("here", "ref"):
                drop(f"{name}_{side}")
            if args.ref_dir is None:
                subprocess.run(["git", "-C", str(HERE), "worktree", "remove", "--force", str(ref_root)], check=True)
    summary: dict[str, object] = {"bench": args.bench, "ref": args.ref or str(args.ref_dir), "rounds": args.rounds}
    for key in keys:
        if all(key in r for side in figures.values() for r in side):
            values = {side: [r[key] for r in figures[side]] for side in ("here", "ref")}
            summary[key] = {side: {"median": statistics.median(v), "best": best(key, v)} for side, v in values.items()}
            print(f"{key:>28}: median here {summary[key]['here']['median']}, {summary['ref']}"
                  f" {summary[key]['ref']['median']}; best here {summary[key]['here']['best']},"
                  f" {summary['ref']} {summary[key]['ref']['best']} ({args.rounds} rounds)", file=sys.stderr)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
