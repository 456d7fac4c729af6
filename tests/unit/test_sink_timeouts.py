"""Every sink waits well below its function's timeout: one rule derives the
sink timeout from the function's, and every sink kind honours it."""

from __future__ import annotations

import pytest

from consolidator.settings import AckSettings, FlushSettings, load_settings, sink_timeout_seconds
from consolidator.sinks import sink_from_url


def test_the_sink_timeout_is_a_third_of_the_function_timeout_at_most_ten_seconds():
    assert sink_timeout_seconds(30) == 10  # the acks function's default: the Kafka sink waited 30 s
    assert sink_timeout_seconds(15) == 5
    assert sink_timeout_seconds(900) == 10
    assert sink_timeout_seconds(None) == 10  # outside Lambda


@pytest.fixture
def acks_env(monkeypatch):
    monkeypatch.setenv("CONSOLIDATOR_DATABASE_URL", "mysql://root:@127.0.0.1:3306/x")
    monkeypatch.setenv("CONSOLIDATOR_COMPLETION_SINK_URL", "kafka://127.0.0.1:9092/completions")
    monkeypatch.setenv("CONSOLIDATOR_FUNCTION_TIMEOUT_SECONDS", "30")


def test_settings_carry_the_function_timeout(acks_env, monkeypatch):
    assert load_settings(AckSettings).sink_timeout_seconds == 10
    monkeypatch.setenv("CONSOLIDATOR_FUNCTION_TIMEOUT_SECONDS", "12")
    monkeypatch.setenv("CONSOLIDATOR_DEAD_LETTER_URL", "file:///tmp/dlq.jsonl")
    monkeypatch.setenv("CONSOLIDATOR_REDIS_URL", "redis://localhost:6379/0")
    monkeypatch.setenv("CONSOLIDATOR_SINK_URL", "file:///tmp/out.jsonl")
    assert load_settings(FlushSettings).sink_timeout_seconds == 4


def test_every_sink_kind_waits_at_most_the_timeout_it_is_given(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    kafka = sink_from_url("kafka://127.0.0.1:1/completions", timeout_s=4)
    try:
        assert kafka.flush_timeout_s == 4
    finally:
        kafka.close()
    for url in ("sqs://sqs.eu-west-1.amazonaws.com/123456789012/completions", "events://bus"):
        config = sink_from_url(url, timeout_s=4)._client.meta.config
        attempts = config.retries["total_max_attempts"]
        assert attempts * (config.connect_timeout + config.read_timeout) <= 4, url
