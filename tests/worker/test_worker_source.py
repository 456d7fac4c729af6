"""Consume any Kafka: the consumer's settings (TLS, SASL PLAIN/SCRAM/OAUTHBEARER with MSK IAM, the
pass-through map) as librdkafka takes them, secrets never shown; several topics or a pattern;
both group protocols; the value formats of the Lambda path."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from format_values import avro_serializer, order
from schema_registry import LocalSchemaRegistry
from support import sql
from worker_support import CLI, durable_positions, running, wait_for

from consolidator.rules.errors import ConfigurationError
from consolidator.settings import WorkerIngestSettings, load_settings
from consolidator.store.connection import RDS_CA_BUNDLE

SECRET = f"s3cret-{uuid.uuid4().hex}"
BASE = {"CONSOLIDATOR_DATABASE_URL": "mysql://u:p@db:3306/c", "CONSOLIDATOR_DEAD_LETTER_URL": "file:///tmp/d.jsonl",
        "CONSOLIDATOR_KAFKA_BOOTSTRAP": "b-1.example:9096,b-2.example:9096", "CONSOLIDATOR_SOURCE_TOPICS": "orders"}


def settings(**variables: str) -> WorkerIngestSettings:
    return load_settings(WorkerIngestSettings, environ={**BASE, **{f"CONSOLIDATOR_{k}": v for k, v in variables.items()}})


SECURITY = {
    "plaintext": ({}, {"security.protocol": "PLAINTEXT"}),
    "tls": ({"KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_SSL_CA_LOCATION": str(RDS_CA_BUNDLE)},
            {"security.protocol": "SSL", "ssl.ca.location": str(RDS_CA_BUNDLE)}),
    "sasl-plain": ({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "PLAIN",
                    "KAFKA_SASL_USERNAME": "api-key", "KAFKA_SASL_PASSWORD": SECRET},
                   {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "api-key",
                    "sasl.password": SECRET}),
    "scram-256": ({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
                   "KAFKA_SASL_USERNAME": "u", "KAFKA_SASL_PASSWORD": SECRET},
                  {"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "u", "sasl.password": SECRET}),
    "scram-512": ({"KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
                   "KAFKA_SASL_USERNAME": "u", "KAFKA_SASL_PASSWORD": SECRET},
                  {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512"}),
    "msk-iam": ({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "OAUTHBEARER",
                 "KAFKA_AWS_REGION": "eu-west-1"},
                {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}),
    "oidc": ({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "OAUTHBEARER",
              "KAFKA_OAUTH_PROVIDER": "librdkafka",
              "KAFKA_CONFIG": json.dumps({"sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "c",
                                          "sasl.oauthbearer.client.secret": SECRET,
                                          "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token"})},
             {"sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc"}),
}


@pytest.fixture
def aws_credentials(monkeypatch):
    """Credentials the MSK IAM signer signs with (locally: no AWS call)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.mark.parametrize("case", SECURITY)
def test_security_settings_become_the_consumer_config_librdkafka_accepts_and_never_show_a_secret(
        case, aws_credentials):
    variables, expected = SECURITY[case]
    s = settings(**variables)
    config = s.consumer_config()
    assert {k: config[k] for k in expected} == expected
    assert (config["enable.auto.commit"], config["enable.auto.offset.store"]) == (False, False)
    assert config["partition.assignment.strategy"] == "cooperative-sticky"
    assert ("oauth_cb" in config) == (case == "msk-iam")
    assert SECRET not in repr(s) and SECRET not in str(s.model_dump())
    Consumer({**config, "log_level": 0}).close()  # librdkafka takes every property and value


def test_msk_iam_tokens_are_signed_locally_for_the_region(aws_credentials):
    callback = settings(**SECURITY["msk-iam"][0]).consumer_config()["oauth_cb"]
    token, expiry_s = callback("")
    assert token and expiry_s > time.time()


@pytest.mark.parametrize(("variables", "named"), [
    ({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "CONSOLIDATOR_KAFKA_SASL_MECHANISM"),
    ({"KAFKA_SASL_MECHANISM": "PLAIN", "KAFKA_SASL_USERNAME": "u", "KAFKA_SASL_PASSWORD": SECRET},
     "CONSOLIDATOR_KAFKA_SECURITY_PROTOCOL SASL_SSL"),
    ({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "KAFKA_SASL_USERNAME": "u"},
     "CONSOLIDATOR_KAFKA_SASL_PASSWORD"),
    ({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "OAUTHBEARER"}, "CONSOLIDATOR_KAFKA_AWS_REGION"),
    ({"KAFKA_SSL_CA_LOCATION": str(RDS_CA_BUNDLE)}, "CONSOLIDATOR_KAFKA_SECURITY_PROTOCOL SSL"),
    ({"KAFKA_CONFIG": json.dumps({"enable.auto.commit": True, "x": SECRET})}, "CONSOLIDATOR_KAFKA_CONFIG"),
    ({"KAFKA_CONFIG": json.dumps({"sasl.password": SECRET})}, "use CONSOLIDATOR_KAFKA_SASL_PASSWORD"),
    ({"KAFKA_CONFIG": '{"sasl.oauthbearer.client.secret": "' + SECRET}, "CONSOLIDATOR_KAFKA_CONFIG: not JSON"),
    ({"SOURCE_TOPICS": "orders,bad topic"}, "CONSOLIDATOR_SOURCE_TOPICS"),
    ({"SOURCE_TOPICS": "^orders-(["}, "is not a regular expression"),
    ({"KAFKA_GROUP_PROTOCOL": "consumer", "KAFKA_ASSIGNMENT_STRATEGY": "range"}, "group.remote.assignor"),
])
def test_bad_kafka_settings_are_one_error_naming_them_never_a_secret(variables, named):
    with pytest.raises(ConfigurationError) as caught:
        settings(**variables)
    assert named in str(caught.value)
    assert SECRET not in str(caught.value)


def test_a_property_librdkafka_refuses_is_a_configuration_error_at_start(worker_env):
    from consolidator.worker.runtime import build_worker

    env = {**worker_env, "CONSOLIDATOR_KAFKA_CONFIG": json.dumps({"fetch.wait.max.ms": "soon"})}
    with pytest.raises(ConfigurationError, match="the Kafka consumer refused it"):
        build_worker(load_settings(WorkerIngestSettings, environ=env), "ingest")


def test_several_topics_are_consumed(kafka, worker_env, store, tmp_path: Path):
    first, second = (f"orders-{uuid.uuid4().hex[:6]}" for _ in range(2))
    kafka.produce(first, 0, 30)
    kafka.produce(second, 30, 20)
    with running({**worker_env, "CONSOLIDATOR_SOURCE_TOPICS": f"{first},{second}"}, role="ingest"):
        wait_for(lambda: len(durable_positions(store, tmp_path / "dead.jsonl")) == 50, 20, "50 rows")
    topics = sql(store, "SELECT src_topic, COUNT(*) AS n FROM buffer_rows GROUP BY src_topic ORDER BY src_topic")
    assert {(r["src_topic"], r["n"]) for r in topics} == {(first, 30), (second, 20)}


def test_a_pattern_subscribes_every_matching_topic_with_the_classic_protocol(kafka, worker_env, store,
                                                                            tmp_path: Path):
    prefix = f"orders-{uuid.uuid4().hex[:6]}"
    kafka.produce(f"{prefix}-eu", 0, 10)
    kafka.produce(f"{prefix}-us", 10, 10)
    kafka.produce(f"other-{prefix}", 20, 10)
    env = {**worker_env, "CONSOLIDATOR_SOURCE_TOPICS": f"^{prefix}-.*", "CONSOLIDATOR_KAFKA_GROUP_PROTOCOL": "classic"}
    with running(env, role="ingest") as worker:
        wait_for(lambda: len(durable_positions(store, tmp_path / "dead.jsonl")) == 20, 30, "20 rows")
        assert sorted({t for t, _ in worker.poll.ledger.assigned()}) == [f"{prefix}-eu", f"{prefix}-us"]
    topics = sql(store, "SELECT DISTINCT src_topic FROM buffer_rows ORDER BY src_topic")
    assert [r["src_topic"] for r in topics] == [f"{prefix}-eu", f"{prefix}-us"]


def test_avro_values_from_a_schema_registry_are_stored_as_their_json_would_be(kafka, topic, worker_env, store,
                                                                              tmp_path: Path):
    registry = LocalSchemaRegistry()
    try:
        serialize = avro_serializer(registry.url)
        kafka.produce(topic, 0, 12, values=lambda n: serialize(order(f"WH-{n % 3}", f"O{n}", (("S1", n),))))
        env = {**worker_env, "CONSOLIDATOR_VALUE_FORMAT": "avro", "CONSOLIDATOR_SCHEMA_REGISTRY_URL": registry.url}
        with running(env, role="ingest"):
            wait_for(lambda: len(durable_positions(store, tmp_path / "dead.jsonl")) == 12, 20, "12 rows")
    finally:
        registry.stop()
    rows = sql(store, "SELECT group_key, item_id, items FROM buffer_rows ORDER BY src_partition, src_offset")
    assert {(r["group_key"], r["item_id"]) for r in rows} == {(f"WH-{n % 3}", f"O{n}") for n in range(12)}
    assert not (tmp_path / "dead.jsonl").exists()


def test_help_lists_the_variables_and_no_value():
    shown = subprocess.run([*CLI, "worker", "--help"], capture_output=True, text=True, check=False, timeout=60,
                           env={**os.environ, "CONSOLIDATOR_KAFKA_SASL_PASSWORD": SECRET})
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert "CONSOLIDATOR_KAFKA_SASL_PASSWORD" in text and "CONSOLIDATOR_SOURCE_TOPICS" in text
    assert SECRET not in shown.stdout + shown.stderr
