import pytest

from consolidator.rules.errors import ConfigurationError
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


FLUSH = {**BASE, "CONSOLIDATOR_REDIS_URL": "redis://localhost:6379/0", "CONSOLIDATOR_SINK_URL": "file:///tmp/out.jsonl"}
DURATIONS = ["CONSOLIDATOR_DEBOUNCE_SECONDS", "CONSOLIDATOR_HARD_WINDOW_SECONDS",
             "CONSOLIDATOR_TICK_INTERVAL_SECONDS", "CONSOLIDATOR_LOCK_TTL_SECONDS"]


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e308", "-5", "0"])
@pytest.mark.parametrize("name", DURATIONS)
def test_durations_must_be_finite_positive_and_bounded(env, name, value):
    env(**FLUSH, **{name: value})
    with pytest.raises(ConfigurationError, match=name):
        load_settings(FlushSettings).policy()


@pytest.mark.parametrize(("name", "value"), [
    ("CONSOLIDATOR_MAX_ATTEMPTS", "99999999999999999999999"), ("CONSOLIDATOR_MAX_ROWS_PER_TICK", "1e3"),
    ("CONSOLIDATOR_MAX_EVENT_BYTES", str(2**70)), ("CONSOLIDATOR_MAX_BATCH_SIZE", "-1"),
])
def test_counts_must_be_integers_in_range(env, name, value):
    env(**FLUSH, **{name: value})
    with pytest.raises(ConfigurationError, match=name):
        load_settings(FlushSettings)


BAD_URLS = {
    "CONSOLIDATOR_DATABASE_URL": "mysql://app:hunter2@db:notaport/x",
    "CONSOLIDATOR_DEAD_LETTER_URL": "sqs://queue-without-account",
    "CONSOLIDATOR_REDIS_URL": "redis://:tok3n-hunter2@cache:6379/not-a-db",
    "CONSOLIDATOR_SINK_URL": "kafka://b1:9092",  # no topic
    "CONSOLIDATOR_REDIS_AUTH_SECRET_ARN": "not-an-arn",
}


def test_every_bad_url_is_named_in_one_error_without_its_credentials(env):
    env(**BAD_URLS, CONSOLIDATOR_DEBOUNCE_SECONDS="inf")
    with pytest.raises(ConfigurationError) as caught:
        load_settings(FlushSettings)
    message = str(caught.value)
    for name in [*BAD_URLS, "CONSOLIDATOR_DEBOUNCE_SECONDS"]:
        assert name in message
    assert "hunter2" not in message and "tok3n" not in message
    assert message.count("invalid configuration") == 1


def test_a_missing_database_is_named_together_with_the_other_errors(env):
    env(CONSOLIDATOR_DEAD_LETTER_URL="ftp://x", CONSOLIDATOR_MAX_EVENT_BYTES="0")
    with pytest.raises(ConfigurationError) as caught:
        load_settings(IngestSettings)
    message = str(caught.value)
    assert "CONSOLIDATOR_DEAD_LETTER_URL" in message and "CONSOLIDATOR_MAX_EVENT_BYTES" in message
    assert "CONSOLIDATOR_DATABASE_URL or CONSOLIDATOR_DATABASE_SECRET_ARN" in message


@pytest.mark.parametrize("url", [
    "mysql://u:p@db:3306/x?ssl_ca=/does/not/exist.pem", "mysql://", "mysql:///x", "postgres://u:p@h/x",
    "mysql://u:p@db:70000/x", "mysql://u:p@db/x;drop",
])
def test_malformed_database_urls_are_refused(env, url):
    env(CONSOLIDATOR_DATABASE_URL=url)
    with pytest.raises(ConfigurationError, match="CONSOLIDATOR_DATABASE_URL") as caught:
        load_settings(CleanupSettings)
    assert ":p@" not in str(caught.value)


@pytest.mark.parametrize("url", [
    "redis://h:6379/x", "redis://h:6379/0?socket_timeout=soon", "http://h:6379", "redis://h:99999/0",
])
def test_malformed_redis_urls_are_refused(env, url):
    env(**{**FLUSH, "CONSOLIDATOR_REDIS_URL": url})
    with pytest.raises(ConfigurationError, match="CONSOLIDATOR_REDIS_URL"):
        load_settings(FlushSettings)


@pytest.mark.parametrize("url", [
    "kafka:///t", "kafka://b:x/t", "kafka://b:9092/a/b", "kafka://b:9092/t?auth=scram",
    "sqs://sqs.eu-west-1.amazonaws.com/q", "events://", "events://bad bus", "file://", "s3://b/k", "nonsense",
])
def test_malformed_sink_urls_are_refused(env, url):
    env(**{**FLUSH, "CONSOLIDATOR_SINK_URL": url})
    with pytest.raises(ConfigurationError, match="CONSOLIDATOR_SINK_URL"):
        load_settings(FlushSettings)


def test_settings_repr_shows_no_url_credentials(env):
    env(**{**FLUSH, "CONSOLIDATOR_DATABASE_URL": "mysql://app:hunter2@db:3306/x",
           "CONSOLIDATOR_REDIS_URL": "rediss://:tok3n@cache:6379/0"})
    text = repr(load_settings(FlushSettings))
    assert "hunter2" not in text and "tok3n" not in text


def test_a_variable_that_must_be_a_json_object_and_is_not_is_named_with_where_it_broke(env):
    from consolidator.settings import MigrateSettings

    env(**BASE, CONSOLIDATOR_DATABASE_USERS='{"ingest": ')
    with pytest.raises(ConfigurationError, match=r"^invalid configuration: CONSOLIDATOR_DATABASE_USERS: not valid JSON"
                                                 r" \(Expecting value: line 1 column 12 \(char 11\)\)$"):
        load_settings(MigrateSettings)
