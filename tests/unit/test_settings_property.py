"""Any value of any URL setting: either one ConfigurationError naming it (credentials masked),
or a value the code that uses it accepts. Never a traceback from deeper down."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import examples

from consolidator.rules.errors import ConfigurationError
from consolidator.settings import FlushSettings, IngestSettings, load_settings
from consolidator.sinks.deadletter import dead_letter_from_url
from consolidator.store.connection import ConnectionParams

SECRET = "Pw0rdXyZ"
noise = st.sampled_from(
    [
        "",
        "",
        "",
        "/",
        "@",
        "?",
        "&",
        "=",
        "#",
        "%",
        "%zz",
        "[",
        "]",
        ",",
        "..",
        " ",
        "é",
        ":",
        "\n",
        "-1",
        "99999",
    ]
)
SCHEMES = ["mysql", "redis", "rediss", "kafka", "sqs", "events", "file", "http", ""]


def structured(schemes: list[str]):
    return st.builds(
        lambda scheme, userinfo, host, port, path, query, junk: (
            f"{scheme}://{userinfo}{host}{port}{path}{query}{junk}"
        ),
        st.sampled_from(schemes) | st.sampled_from(SCHEMES),
        st.sampled_from(["", "", f"u:{SECRET}@", f":{SECRET}@", "u@", f"u:{SECRET}@x@"]),
        st.sampled_from(
            [
                "h",
                "127.0.0.1",
                "sqs.eu-west-1.amazonaws.com",
                "b1:9092,b2",
                "",
                "bad host",
                "[::1]",
                ".",
                "orders-bus",
            ]
        ),
        st.sampled_from(["", "", ":3306", ":9092", ":0", ":99999", ":x"]),
        st.sampled_from(
            [
                "",
                "/",
                "/db",
                "/0",
                "/12",
                "/x",
                "/topic",
                "/123456789012/q",
                "/123456789012/q.fifo",
                "/1/q",
                "/a/b",
                "/tmp/out.jsonl",
            ]
        ),
        st.sampled_from(
            [
                "",
                "",
                "?ssl=true",
                "?ssl_ca=/nope.pem",
                "?auth=iam&region=eu-west-1",
                "?auth=scram",
                "?socket_timeout=x",
                "?db=2",
                f"?password={SECRET}",
                "?source=s&detail_type=d",
            ]
        ),
        noise | st.just("") | st.just(""),
    )


def urls(*schemes: str):
    return st.one_of(
        structured(list(schemes)),
        structured(list(schemes)),
        st.lists(noise, max_size=6).map("".join),
        st.text(max_size=30),
    )


@pytest.fixture
def clean_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("CONSOLIDATOR_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    return monkeypatch


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), name=st.sampled_from(["DATABASE_URL", "REDIS_URL", "SINK_URL", "DEAD_LETTER_URL"]))
def test_any_url_is_refused_by_name_or_usable(clean_env, data, name):
    values = {
        "DATABASE_URL": "mysql://root:@127.0.0.1:3306/x",
        "REDIS_URL": "redis://127.0.0.1:6379/0",
        "SINK_URL": "file:///tmp/out.jsonl",
        "DEAD_LETTER_URL": "file:///tmp/dlq.jsonl",
    }
    values[name] = data.draw(
        urls(
            *{
                "DATABASE_URL": ["mysql"],
                "REDIS_URL": ["redis", "rediss"],
                "SINK_URL": ["kafka", "sqs", "events", "file"],
                "DEAD_LETTER_URL": ["sqs", "file"],
            }[name]
        ),
        label=name,
    )
    if any("\x00" in v for v in values.values()):
        return  # the environment cannot hold NUL
    for variable, value in values.items():
        clean_env.setenv(f"CONSOLIDATOR_{variable}", value)
    try:
        loaded = load_settings(FlushSettings)
    except ConfigurationError as error:
        message = str(error)
        assert f"CONSOLIDATOR_{name}" in message or (name == "DATABASE_URL" and not values[name].strip())
        assert SECRET not in message
        assert message.startswith("invalid configuration: ")
        return
    # accepted: the parsers the services use take it as it is
    ConnectionParams.from_url(loaded.database_url)
    from redis.connection import parse_url

    parse_url(loaded.redis_url)
    dead_letter_from_url(loaded.dead_letter_url)
    _parse_sink(loaded.sink_url)


def _parse_sink(url: str) -> None:
    """What ``sink_from_url`` checks, without building clients."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    assert parts.scheme in ("kafka", "sqs", "events", "file")
    if parts.scheme == "kafka":
        topic = parts.path.strip("/")
        assert parts.netloc and topic and "/" not in topic
    if parts.scheme == "sqs":
        assert parts.netloc and parts.path.count("/") == 2
    if parts.scheme == "events":
        assert parts.netloc
    if parts.scheme == "file":
        assert parts.path


# -- every setting and every Spark option: a configuration or one error naming it ------------------

VALID = {
    "CONSOLIDATOR_DATABASE_URL": "mysql://root:@127.0.0.1:3306/x", "CONSOLIDATOR_REDIS_URL": "redis://127.0.0.1:6379/0",
    "CONSOLIDATOR_SINK_URL": "file:///tmp/out.jsonl", "CONSOLIDATOR_DEAD_LETTER_URL": "file:///tmp/dlq.jsonl",
    "CONSOLIDATOR_COMPLETION_SINK_URL": "file:///tmp/c.jsonl", "CONSOLIDATOR_KAFKA_BOOTSTRAP": "b-1:9092",
    "CONSOLIDATOR_SOURCE_TOPIC": "orders", "CONSOLIDATOR_SOURCE_TOPICS": "orders", "CONSOLIDATOR_EMR_APPLICATION_ID": "00abc",
    "CONSOLIDATOR_EMR_JOB_ROLE_ARN": "arn:aws:iam::111111111111:role/job", "CONSOLIDATOR_EMR_BUCKET": "my-bucket",
}
ODD = ["inf", "-inf", "Infinity", "nan", "NaN", "1e300", "-1e300", "9e15", "1e12", "-1", "0", "0.0", "0.0001",
       "1e-9", "", " ", "abc", "1_000", "0x10", "true", "60", "300", "1800", "3600", "3.5", "500", "10000", "10001",
       "1000", "1001", "2678400", "2678401", "99999999999999999999", "é", "-0"]
values = st.sampled_from(ODD) | st.text(max_size=12).filter(lambda v: "\x00" not in v) | \
    st.floats().map(repr) | st.integers(-(10**20), 10**20).map(str)


def _models():
    from consolidator import settings

    return [getattr(settings, name) for name in settings.__all__ if name.endswith("Settings")]


def _variables():
    return sorted({f"CONSOLIDATOR_{f.upper()}" for model in _models() for f in model.model_fields})


def _use(loaded) -> None:
    """What a runtime does first with its settings: build the policy, the limit, the names."""
    for method in ("policy", "rate_limit", "field_names", "topics", "consumer_config"):
        if hasattr(loaded, method):
            getattr(loaded, method)()


@settings(max_examples=examples(200), deadline=None)
@given(data=st.data())
def test_any_value_of_any_setting_is_usable_or_refused_by_name(data):
    name = data.draw(st.sampled_from(_variables()), label="variable")
    value = data.draw(values, label="value")
    for model in _models():
        environ = {**VALID, name: value}
        try:
            loaded = load_settings(model, environ=environ)
        except ConfigurationError as error:
            message = str(error)
            assert message.startswith("invalid configuration: ") and name in message, (model, message)
            continue
        _use(loaded)


def test_a_misspelt_variable_names_the_closest_setting():
    with pytest.raises(ConfigurationError) as error:
        load_settings(FlushSettings, environ={**VALID, "CONSOLIDATOR_DEBOUNSE_SECONDS": "60"})
    assert str(error.value) == ("invalid configuration: CONSOLIDATOR_DEBOUNSE_SECONDS is not a known setting;"
                                " did you mean CONSOLIDATOR_DEBOUNCE_SECONDS?")
    # a variable meant for another runtime (CDK gives each function only its own) is not unknown
    load_settings(IngestSettings, environ={**VALID, "CONSOLIDATOR_COMPLETION_LEASE_SECONDS": "60",
                                           "CONSOLIDATOR_ENVIRONMENTS": "dev"})


GRID = st.lists(values.filter(lambda v: "," not in v), min_size=1, max_size=3).map(",".join)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_spark_option_is_usable_or_one_usage_error_naming_it(data, capsys, clean_env):
    """The replay grid and the stream's setting options, as the commands build them."""
    import typer

    from consolidator.cli.spark.commands import _settings, replay_grid
    from consolidator.settings import ReplaySettings, StreamSettings

    option = data.draw(st.sampled_from(["debounce_seconds", "hard_window_seconds", "max_batch_size",
                                        "event_ttl_seconds", "rate_limit", "tick_interval_seconds",
                                        "rate_limit_batches", "rate_limit_period_seconds", "sku_field"]))
    params = dict.fromkeys(["debounce_seconds", "hard_window_seconds", "max_batch_size", "event_ttl_seconds",
                            "rate_limit", "tick_interval_seconds", "rate_limit_batches",
                            "rate_limit_period_seconds", "sku_field", "max_event_bytes"])
    raw = data.draw(GRID if option in ("debounce_seconds", "hard_window_seconds", "max_batch_size",
                                       "event_ttl_seconds", "rate_limit") else values, label=option)
    params[option] = raw
    flag = "--" + option.replace("_", "-")
    capsys.readouterr()
    try:
        policies, loaded = replay_grid(params)
        assert policies and all(p.policy.hard_window_ms >= p.policy.debounce_ms for p in policies)
        _use(loaded)
    except typer.BadParameter as error:
        assert error.param_hint == flag
    except typer.Exit as stop:
        assert stop.exit_code == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and err.startswith("configuration error: ")
        assert flag in err or "--rate-limit" in err or "hard window" in err, err
    # the stream: each setting option is an override of StreamSettings
    for name, value in {**VALID, "CONSOLIDATOR_SINK_URL": None}.items():
        clean_env.setenv(name, value or "file:///tmp/out.jsonl")
    single = data.draw(values, label="stream value")
    capsys.readouterr()  # the replay's notes (combinations left out) are not the stream's
    try:
        _use(_settings(StreamSettings, {option: single} if option in ReplaySettings.model_fields else {}))
    except typer.Exit as stop:
        assert stop.exit_code == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and flag in err, err
