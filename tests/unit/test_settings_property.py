"""Any value of any URL setting: either one ConfigurationError naming it (credentials masked),
or a value the code that uses it accepts. Never a traceback from deeper down."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from consolidator.deadletter import dead_letter_from_url
from consolidator.errors import ConfigurationError
from consolidator.settings import FlushSettings, load_settings
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


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
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
