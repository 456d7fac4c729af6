"""``consolidator limits``, and the rate limit and TTL as ``status`` and ``flush`` show them."""

from __future__ import annotations

import json

import pytest
from test_cli import NOW, cli, cli_json, env, flush_env, ingest, migrated  # noqa: F401 (fixtures)

from consolidator.rules.batch import iso_ms
from consolidator.rules.clock import SystemClock


def test_limits_set_list_clear(env, migrated):  # noqa: F811
    assert cli_json(env, "limits", "list") == {"default": None, "overrides": []}
    assert cli_json(env, "limits", "set", "WH-1", "--batches", "2", "--per", "60") == {
        "set": {"group_key": "WH-1", "batches": 2, "period_s": 60.0}}
    cli_json(env, "limits", "set", "WH 2", "--batches", "10", "--per", "3600")
    cli_json(env, "limits", "set", "WH-1", "--batches", "3", "--per", "90")  # replaces
    listed = cli_json(env | {"CONSOLIDATOR_RATE_LIMIT_BATCHES": "5"}, "limits", "list")
    assert listed == {"default": {"batches": 5, "period_s": 60.0}, "overrides": [
        {"group_key": "WH 2", "batches": 10, "period_s": 3600.0},
        {"group_key": "WH-1", "batches": 3, "period_s": 90.0}]}
    human = cli(env, "limits", "list")
    assert human.exit_code == 0 and "WH-1" in human.stdout and "not limited" in human.stdout
    assert cli_json(env, "limits", "clear", "WH-1") == {"cleared": True, "group_key": "WH-1"}
    assert cli_json(env, "limits", "clear", "WH-1", exit_code=1) == {"cleared": False, "group_key": "WH-1"}
    assert [o["group_key"] for o in cli_json(env, "limits", "list")["overrides"]] == ["WH 2"]
    assert cli(env, "limits", "set", "WH-1", "--batches", "0", "--per", "60").exit_code == 2
    bad = cli(env | {"CONSOLIDATOR_RATE_LIMIT_BATCHES": "-1"}, "limits", "list")
    assert bad.exit_code == 2 and "CONSOLIDATOR_RATE_LIMIT_BATCHES" in bad.stderr



@pytest.mark.parametrize(("group", "per", "named"), [
    ("WH-1", "inf", "inf"), ("WH-1", "nan", "nan"), ("WH-1", "1e300", "1e+300"), ("WH-1", "9e15", "9e+15"),
    ("WH-1", "1e12", "1e+12"), ("WH-1", "0", "0"), ("WH-1", "-5", "-5"),
    ("", "60", "0 characters"), ("G" * 300, "60", "300 characters"),
])
def test_limits_set_refuses_what_the_settings_refuse(env, migrated, group, per, named):  # noqa: F811
    """The bounds of CONSOLIDATOR_RATE_LIMIT_PERIOD_SECONDS and the key limit of the buffer:
    exit 2, one line naming the value and the allowed range, nothing stored."""
    result = cli(env, "limits", "set", group, "--batches", "1", "--per", per)
    assert result.exit_code == 2, result.output
    error = result.stderr.strip().splitlines()
    assert len(error) == 1 and named in error[0] and "Traceback" not in result.output
    assert ("0.001 <= x <= 604800" if group == "WH-1" else "1 to 191 characters") in error[0]
    assert cli_json(env, "limits", "list")["overrides"] == []


def test_throttled_group_in_flush_status_and_dry_run(flush_env, migrated):  # noqa: F811
    for offset, order, group in ((1, "A", "WH-1"), (2, "B", "WH-1"), (3, "C", "WH-2"), (4, "D", "WH-2")):
        ingest(migrated, offset, order, group)
    limited = flush_env | {"CONSOLIDATOR_MAX_BATCH_SIZE": "1", "CONSOLIDATOR_EVENT_TTL_SECONDS": "21600",
                       "CONSOLIDATOR_DEBOUNCE_SECONDS": "0.001"}
    cli_json(limited, "limits", "set", "WH-1", "--batches", "1", "--per", "3600")
    before = SystemClock().now_ms()
    once = cli_json(limited, "flush", "--once")
    assert sorted(b["group_key"] for b in once["published"]) == ["WH-1", "WH-2", "WH-2"]
    until = once["throttled"]["WH-1"]
    assert list(once["throttled"]) == ["WH-1"] and 3_600_000 <= until - before <= 3_600_000 + 60_000
    status = cli_json(limited, "status")
    assert [(t["group_key"], t["next_allowed_ms"]) for t in status["throttled"]] == [("WH-1", until)]
    dry = cli_json(limited, "flush", "--dry-run")
    assert [(d["group_key"], d["throttled_until_ms"]) for d in dry["due"]] == [("WH-1", until)]
    human = cli(limited, "flush", "--dry-run")
    assert human.exit_code == 0
    assert f"WH-1: due but throttled until {iso_ms(until)}" in human.stdout
    assert "throttled groups" in cli(limited, "status").stdout


def test_flush_expires_events_over_the_default_ttl(flush_env, migrated, tmp_path):  # noqa: F811
    defaults = flush_env | {"CONSOLIDATOR_EVENT_TTL_SECONDS": None,  # unset: the default, 6 h
                            "CONSOLIDATOR_DEBOUNCE_SECONDS": "0.001"}
    ingest(migrated, 1, "OLD", timestamp_ms=NOW - 7 * 3_600_000)
    ingest(migrated, 2, "NEW", timestamp_ms=NOW)
    once = cli_json(defaults, "flush", "--once")
    assert once["expired"] == 1 and [b["size"] for b in once["published"]] == [1]
    entries = [json.loads(line) for line in (tmp_path / "dead-letter.jsonl").read_text().splitlines()]
    assert [(e["reason"], e["item_id"], e["group_key"]) for e in entries] == [("expired", "OLD", "WH-1")]
    assert migrated.row_counts() == {"EXPIRED": 1, "SENT": 1}
    assert cli_json(defaults, "status")["rows"] == {"EXPIRED": 1, "SENT": 1}
