import pytest

from consolidator.errors import ConfigurationError
from consolidator.settings import CleanupSettings, FlushSettings, IngestSettings, load_settings

BASE = {
    "CONSOLIDATOR_DATABASE_URL": "mysql://root:@127.0.0.1:3306/x",
    "CONSOLIDATOR_DEAD_LETTER_URL": "file:///tmp/dlq.jsonl",
}


@pytest.fixture
def env(monkeypatch):
    for name in list(__import__("os").environ):
        if name.startswith("CONSOLIDATOR_"):
            monkeypatch.delenv(name)

    def set_env(**values):
        for name, value in values.items():
            monkeypatch.setenv(name, value)

    return set_env


def test_defaults_follow_the_spec(env):
    env(**BASE, CONSOLIDATOR_REDIS_URL="redis://localhost:6379/0", CONSOLIDATOR_SINK_URL="file:///tmp/out.jsonl")
    settings = load_settings(FlushSettings)
    policy = settings.policy()
    assert (policy.debounce_ms, policy.hard_window_ms, policy.max_batch_size, policy.tick_interval_ms) == (
        300_000, 1_800_000, 500, 30_000)
    assert settings.max_event_bytes == 256 * 1024
    assert settings.field_names().group_key == "location_id"


def test_missing_variable_is_named(env):
    env(CONSOLIDATOR_DATABASE_URL=BASE["CONSOLIDATOR_DATABASE_URL"])
    with pytest.raises(ConfigurationError, match="CONSOLIDATOR_DEAD_LETTER_URL is required"):
        load_settings(IngestSettings)


def test_malformed_variable_is_named_with_its_value(env):
    env(**BASE, CONSOLIDATOR_MAX_EVENT_BYTES="lots")
    with pytest.raises(ConfigurationError, match=r"CONSOLIDATOR_MAX_EVENT_BYTES: .*'lots'"):
        load_settings(IngestSettings)


def test_every_bad_variable_is_named_at_once(env):
    env(**BASE, CONSOLIDATOR_DEBOUNCE_SECONDS="-1", CONSOLIDATOR_SINK_URL="ftp://x",
        CONSOLIDATOR_REDIS_URL="redis://localhost")
    with pytest.raises(ConfigurationError) as caught:
        load_settings(FlushSettings)
    message = str(caught.value)
    assert "CONSOLIDATOR_DEBOUNCE_SECONDS" in message
    assert "CONSOLIDATOR_SINK_URL" in message and "ftp://x" in message


def test_a_database_source_is_required(env):
    env(CONSOLIDATOR_DEAD_LETTER_URL="file:///tmp/x.jsonl")
    with pytest.raises(ConfigurationError, match="CONSOLIDATOR_DATABASE_URL or CONSOLIDATOR_DATABASE_SECRET_ARN"):
        load_settings(IngestSettings)


def test_secret_arn_is_enough(env):
    env(CONSOLIDATOR_DATABASE_SECRET_ARN="arn:aws:secretsmanager:eu-west-1:1:secret:db")
    assert load_settings(CleanupSettings).retention_months == 3
