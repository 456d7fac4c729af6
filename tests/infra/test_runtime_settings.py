"""The CDK environment files and the runtime read one declaration of the settings: every
synthesized function's variables load as its handler's settings model, and an environment file
is refused for exactly what the runtime refuses."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "infra"))

from consolidator_infra.config import ConfigError, load_environment
from consolidator_infra.config_policy import POLICY_SETTINGS

from consolidator.settings import load_settings, unknown_variables

pytestmark = pytest.mark.infra


def test_every_function_environment_loads_as_its_runtime_settings(env):
    from consolidator_infra.functions import DEPLOY_TIME_PLACEHOLDERS, RUNTIME_SETTINGS

    policy = env.config.policy
    loaded, environments = {}, {}
    for resource in env.resources("AWS::Lambda::Function").values():
        variables = resource["Properties"].get("Environment", {}).get("Variables", {})
        name = variables.get("POWERTOOLS_SERVICE_NAME", "").removeprefix("consolidator-")
        if name not in RUNTIME_SETTINGS:
            continue  # CDK's own helper functions
        # values resolved at deploy time (CloudFormation intrinsics) stand in as placeholders
        environ = {k: v if isinstance(v, str) else DEPLOY_TIME_PLACEHOLDERS[k] for k, v in variables.items()}
        assert unknown_variables(environ) == []
        loaded[name] = load_settings(RUNTIME_SETTINGS[name], environ=environ)
        environments[name] = environ
    expected = {"ingest", "flush", "cleanup", "migrate"} | ({"acks"} if env.config.completion else set())
    assert set(loaded) == expected
    flush = loaded["flush"]
    for name, settings in loaded.items():  # every deployed setting reaches each function that declares it
        for setting in POLICY_SETTINGS:
            if setting in RUNTIME_SETTINGS[name].model_fields and getattr(policy, setting) is not None:
                assert f"CONSOLIDATOR_{setting.upper()}" in environments[name], (name, setting)
                assert getattr(settings, setting) == getattr(policy, setting), (name, setting)
    assert {s for model in RUNTIME_SETTINGS.values() for s in model.model_fields} >= set(POLICY_SETTINGS)
    assert loaded["ingest"].field_names() == flush.field_names()
    assert loaded["cleanup"].retention_months == policy.retention_months
    assert loaded["ingest"].consumer_group == env.config.msk.consumer_group_id, "the ingest spans name the mapping's"
    assert flush.environment == env.config.name


def _write(tmp_path: Path, **policy) -> Path:
    data = json.loads(load_environment("dev").model_dump_json())
    data["name"] = "bad"
    data["policy"].update(policy)
    # json.dumps writes inf as Infinity, which json.loads (and so load_environment) reads back
    (tmp_path / "bad.json").write_text(json.dumps(data))
    return tmp_path


@pytest.mark.parametrize(("policy", "message"), [
    ({"rate_limit_period_seconds": float("inf")}, "policy.rate_limit_period_seconds: Input should be a finite number"),
    ({"event_ttl_seconds": 1e300}, "policy.event_ttl_seconds: Input should be less than or equal to 31536000"),
    ({"debounce_seconds": 1e9, "hard_window_seconds": 1e9}, "policy.debounce_seconds: Input should be less than"),
    ({"max_attempts": 1000}, "policy.max_attempts: Input should be less than or equal to 100"),
    ({"debounce_seconds": 600, "hard_window_seconds": 300}, "must be at least debounce_seconds"),
    ({"tick_interval_seconds": 120}, "scheduled once a minute"),
    ({"sku_field": ""}, "policy.sku_field"),
])
def test_environment_file_refused_with_the_runtime_bounds(tmp_path, policy, message):
    with pytest.raises(ConfigError, match="bad.json") as error:
        load_environment("bad", _write(tmp_path, **policy))
    assert message in str(error.value)


def test_synth_time_check_names_the_function_and_variable():
    from consolidator_infra.functions import check_function_environment

    with pytest.raises(ConfigError) as error:
        check_function_environment("acks", {"CONSOLIDATOR_DATABASE_URL": "mysql://u@h/db",
                                            "CONSOLIDATOR_COMPLETION_SINK_URL": "file:///tmp/c.jsonl",
                                            "CONSOLIDATOR_COMPLETION_DEADLINE_SECONDS": "1e12",
                                            "CONSOLIDATOR_COMPLETION_LEASE_SECOND": "60"})
    text = str(error.value)
    assert text.startswith("function acks: invalid configuration: ")
    assert "CONSOLIDATOR_COMPLETION_DEADLINE_SECONDS: Input should be less than or equal to 31536000" in text
    assert "did you mean CONSOLIDATOR_COMPLETION_LEASE_SECONDS" in text
