"""``python -m chaos``: fault injection against the real handlers, with exact checkers.

Starts its own MariaDB and Redis on free ports with their own data directories (never the
services on 3306/6379), runs every scenario for every seed, proves each checker bites on a
corrupted copy of a clean result, prints a summary table, and ends with one JSON line.
Exit 0 only when no run has a violation and every checker passed its self-test.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from chaos.checks import CHECKERS, self_test
from chaos.fleet import FLEET_SCENARIOS, FleetRun
from chaos.scenarios import SCENARIOS, Run, RunResult
from chaos.servers import MariaDB, Redis

ALL_SCENARIOS = {**SCENARIOS, **FLEET_SCENARIOS}
# (events per run, seeds, scenarios): the short profile runs one worker scenario (the fleet's runs
# are the longest), the full one every scenario.
PROFILES = {"short": (1_500, [1], [*SCENARIOS, "worker-kill"]),
            "full": (10_000, [1, 2, 3, 4, 5], list(ALL_SCENARIOS))}
# More seeds of a scenario, smaller runs, where one seed is too few to catch a known class of bug:
# (scenario, events, seeds). completion-acks: an acker killed right after publishing a completion
# (a later copy published with other bytes); each seed kills several ackers there.
EXTRA_RUNS = {"short": [("completion-acks", 400, [2, 3])], "full": []}
COLUMNS = ("lost", "duplicated", "split", "stuck", "not_durable")


def _table(results: list[RunResult], selftest: dict[str, bool]) -> str:
    header = f"{'scenario':<18} {'events':>7} {'seeds':>5} {'faults':>7} {'lost':>5} {'dup':>4} {'split':>5} " \
             f"{'stuck':>5} {'not-durable':>11} {'other':>5} {'same-id re-pub':>14} {'seconds':>8}"
    lines = [header, "-" * len(header)]
    for name in dict.fromkeys(r.scenario for r in results):
        runs = [r for r in results if r.scenario == name]
        faults = sum(r.injected for r in runs)
        counts = {c: sum(len(r.violations.get(c, [])) for r in runs) for c in COLUMNS}
        other = sum(len(v) for r in runs for k, v in r.violations.items() if k not in COLUMNS)
        lines.append(f"{name:<18} {sum(r.events for r in runs):>7} {len(runs):>5} {faults:>7} {counts['lost']:>5} "
                     f"{counts['duplicated']:>4} {counts['split']:>5} {counts['stuck']:>5} {counts['not_durable']:>11} {other:>5} "
                     f"{sum(r.republished_same_id for r in runs):>14} {sum(r.seconds for r in runs):>8.1f}")
    bitten = sum(selftest.values())
    lines.append(f"{'self-test':<18} checkers that flag their corruption: {bitten}/{len(CHECKERS)}")
    return "\n".join(lines)


def _plan(args, events: int, seeds: list[int]) -> list[tuple[str, int, int]]:
    """(scenario, events, seed) of every run: the profile's seeds for each chosen scenario, then
    the profile's extra runs of the chosen scenarios (unless seeds or events were given)."""
    chosen = args.scenario or PROFILES[args.profile][2]
    plan = [(name, events, seed) for name in chosen for seed in seeds]
    if args.seeds is None and args.events is None:
        plan += [(name, n, seed) for name, n, extra in EXTRA_RUNS[args.profile] if name in chosen for seed in extra]
    return plan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", choices=sorted(PROFILES), default="full")
    parser.add_argument("--events", type=int, help="events per run (default: the profile's)")
    parser.add_argument("--seeds", type=int, nargs="+", help="seeds (default: the profile's)")
    parser.add_argument("--scenario", action="append", choices=sorted(ALL_SCENARIOS), help="repeatable; default all")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, outputs)")
    args = parser.parse_args(argv)
    events, seeds, _ = PROFILES[args.profile]
    events, seeds = args.events or events, args.seeds or seeds
    repo = Path(__file__).resolve().parents[1]
    workdir = Path(tempfile.mkdtemp(prefix="consolidator-chaos-"))
    mariadb, redis = MariaDB(workdir), Redis(workdir)
    results: list[RunResult] = []
    selftest: dict[str, bool] = {}
    started = time.monotonic()
    try:
        print(f"chaos: own MariaDB on 127.0.0.1:{mariadb.port}, Redis on 127.0.0.1:{redis.port}, work dir {workdir}",
              file=sys.stderr)
        mariadb.install()
        mariadb.start()
        redis.start()
        for name, run_events, seed in _plan(args, events, seeds):
            print(f"chaos: {name} seed {seed}: {run_events} events ...", file=sys.stderr, flush=True)
            scenario = ALL_SCENARIOS[name]
            runner = FleetRun if scenario.workers else Run
            result = runner(scenario, seed, run_events, mariadb, redis, workdir, repo).execute()
            results.append(result)
            verdict = "ok" if result.ok else f"VIOLATIONS {json.dumps(result.violations)}"
            print(f"chaos: {name} seed {seed}: {verdict} ({result.seconds:.1f}s, faults {result.faults})",
                  file=sys.stderr, flush=True)
            if result.ok and not selftest:
                selftest = self_test(result.snapshot)
    finally:
        redis.stop()
        mariadb.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(_table(results, selftest))
    violations = sum(len(v) for r in results for v in r.violations.values())
    summary = {
        "profile": args.profile, "events_per_run": events, "seeds": seeds, "runs": len(results),
        "events_total": sum(r.events for r in results), "violations": violations,
        "faults_injected": sum(r.injected for r in results),
        "same_id_republishes": sum(r.republished_same_id for r in results),
        "checkers_self_tested": sum(selftest.values()), "checkers": len(CHECKERS), "self_test": selftest,
        "seconds": round(time.monotonic() - started, 1),
        "scenarios": {name: {"runs": sum(1 for r in results if r.scenario == name),
                             "violations": {k: v for r in results if r.scenario == name
                                            for k, v in r.violations.items() if v}}
                      for name in dict.fromkeys(r.scenario for r in results)},
    }
    print(json.dumps(summary, sort_keys=True))
    return 0 if violations == 0 and selftest and all(selftest.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
