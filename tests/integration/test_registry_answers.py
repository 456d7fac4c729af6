"""What a schema registry answers, through the real ingest handler: every answer is a schema,
poison for the records naming that id (dead-lettered with the reason), or "unavailable" (the
records wait, their partition cut, nothing dead-lettered); lookups are bound to the allowed
subjects, counted and timed per invocation, bounded in bytes and held to one deadline; the
credentials never travel in cleartext."""

from __future__ import annotations

import json
import time

import boto3
import pytest
from format_values import ORDER_V1, avro_body, confluent, order
from moto import mock_aws
from registry_handler import dead_letters, failed_offsets, handler_environment, invoke, load_handler
from schema_registry import LocalSchemaRegistry, Misbehaviour
from support import record, sql

from consolidator.rules.errors import ConfigurationError


@pytest.fixture
def registry():
    r = LocalSchemaRegistry()
    yield r
    r.stop()


@pytest.fixture
def dead_letter(tmp_path):
    return tmp_path / "dead-letter.jsonl"


@pytest.fixture
def handler(monkeypatch, registry, database_url, store, dead_letter):
    def load(**settings: str):
        for name, value in handler_environment(database_url, dead_letter, registry.url, **settings).items():
            monkeypatch.setenv(name, value)
        return load_handler()
    return load


def _stored(store) -> list[str]:
    return [r["item_id"] for r in sql(store, "SELECT item_id FROM buffer_rows ORDER BY item_id")]


def _lookups(registry) -> int:
    return sum(path.startswith("/schemas/ids/") for path in registry.paths)


def _value(schema_id: int, item: str) -> bytes:
    return confluent(schema_id, avro_body(order("WH-1", item)))


# -- subjects -----------------------------------------------------------------------------------


@pytest.mark.parametrize("settings, stored", [({}, ["A1", "A3"]),
                                              ({"SCHEMA_SUBJECTS": '["orders-value", "returns-value"]'},
                                               ["A1", "A2", "A3"])])
def test_a_schema_id_is_accepted_only_under_the_allowed_subjects(handler, registry, dead_letter, store, settings,
                                                                  stored):
    good = registry.register("AVRO", json.dumps(ORDER_V1))
    other = registry.register("AVRO", json.dumps({**ORDER_V1, "doc": "another topic's"}), subject="returns-value")
    records = [record(0, _value(good, "A1")), record(1, _value(other, "A2")), record(2, _value(good, "A3"))]
    assert invoke(handler(**settings), records) == {"batchItemFailures": []}
    assert _stored(store) == stored
    if len(stored) == 2:
        [entry] = dead_letters(dead_letter)
        assert (entry["reason"], entry["schema_id"]) == ("unknown_schema", str(other))
        assert "registered under ['returns-value'], none of the allowed subjects ['orders-value']" in entry["detail"]


def test_a_glue_schema_version_is_accepted_only_under_the_allowed_schema_names(monkeypatch, database_url, store,
                                                                                 dead_letter):
    from format_values import glue as glue_frame

    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    with mock_aws():
        client = boto3.client("glue")
        client.create_registry(RegistryName="shop")
        versions = {name: client.create_schema(
            RegistryId={"RegistryName": "shop"}, SchemaName=name, DataFormat="AVRO", Compatibility="BACKWARD",
            SchemaDefinition=json.dumps(ORDER_V1))["SchemaVersionId"] for name in ("orders", "returns")}
        environment = handler_environment(database_url, dead_letter, "", GLUE_REGISTRY_NAME="shop")
        for name, value in environment.items():
            if value:
                monkeypatch.setenv(name, value)
        records = [record(n, glue_frame(versions[name], avro_body(order("WH-1", f"A{n}"))))
                   for n, name in enumerate(("orders", "returns", "orders"))]
        assert invoke(load_handler(), records) == {"batchItemFailures": []}
    assert _stored(store) == ["A0", "A2"]  # Glue's serializers name a topic's schema after the topic
    [entry] = dead_letters(dead_letter)
    assert (entry["reason"], entry["schema_id"]) == ("unknown_schema", versions["returns"])
    assert "belongs to schema 'returns', none of the allowed ['orders']" in entry["detail"]


# -- lookups per invocation, caches ---------------------------------------------------------------


def test_registry_lookups_per_invocation_are_capped_and_the_rest_wait(handler, registry, dead_letter, store):
    records = [record(n, _value(1000 + n, f"A{n}")) for n in range(30)]  # 30 ids the registry does not know
    module = handler()
    response = invoke(module, records)
    assert _lookups(registry) == 10  # SCHEMA_REGISTRY_MAX_LOOKUPS' default
    assert failed_offsets(response) == list(range(10, 30))
    assert [(e["source"]["offset"], e["reason"]) for e in dead_letters(dead_letter)] == [
        (n, "unknown_schema") for n in range(10)]
    response = invoke(module, records[10:])  # the next invocation goes on from the cut
    assert failed_offsets(response) == list(range(20, 30)) and _lookups(registry) == 20


def test_the_schema_caches_are_bounded(handler, registry, monkeypatch):
    ids = [registry.register("AVRO", json.dumps({**ORDER_V1, "doc": f"version {n}"})) for n in range(40)]
    module = handler()
    for start in range(0, 40, 10):  # ten lookups an invocation
        records = [record(n, _value(ids[n], f"A{n}")) for n in range(start, start + 10)]
        assert invoke(module, records) == {"batchItemFailures": []}
    cache = module.service().values.cache
    assert len(cache.readers) == 32  # sources.formats.limits.MAX_CACHED_SCHEMAS, the least recently used out
    monkeypatch.setenv("CONSOLIDATOR_SCHEMA_REGISTRY_MAX_LOOKUPS", "1000")
    module = load_handler()
    unknown = [record(100 + n, _value(5000 + n, f"B{n}")) for n in range(1100)]
    assert invoke(module, unknown[:1000]) == {"batchItemFailures": []}
    assert invoke(module, unknown[1000:]) == {"batchItemFailures": []}
    assert len(module.service().values.cache.failures) == 1024  # sources.formats.limits.MAX_REMEMBERED_FAILURES


@pytest.mark.timeout(60)
def test_registry_lookups_take_at_most_half_the_function_timeout(handler, registry, store):
    ids = [registry.register("AVRO", json.dumps({**ORDER_V1, "doc": f"version {n}"})) for n in range(10)]
    registry.misbehave("/schemas/ids/*", Misbehaviour(body=None, delay_seconds=0.3))  # each request late
    module = handler(FUNCTION_TIMEOUT_SECONDS="2")
    records = [record(n, _value(schema_id, f"A{n}")) for n, schema_id in enumerate(ids)]
    started = time.monotonic()
    response = invoke(module, records)
    took = time.monotonic() - started
    failed = failed_offsets(response)
    assert failed and failed == list(range(10 - len(failed), 10))  # the records after the cut wait
    assert took < 2.5  # half of 2 s for the lookups, one lookup cut at its end, the rest stored


def test_after_the_registry_fails_no_other_lookup_is_made_in_the_invocation(handler, registry, dead_letter):
    ids = [registry.register("AVRO", json.dumps({**ORDER_V1, "doc": f"version {n}"})) for n in range(3)]
    registry.status = 503
    records = [record(0, _value(schema_id, "A"), partition=n) for n, schema_id in enumerate(ids)]
    response = invoke(handler(), records)
    assert len(response["batchItemFailures"]) == 3 and not dead_letters(dead_letter)
    assert _lookups(registry) == 1


# -- what an answer is ----------------------------------------------------------------------------

SCHEMA_TEXT = json.dumps({"schema": json.dumps(ORDER_V1)})


@pytest.mark.parametrize("answer, outcome", [
    (Misbehaviour(200, b"[]"), "not a schema"),
    (Misbehaviour(200, b"null"), "not a schema"),
    (Misbehaviour(200, b'{"references": "x"}'), "not a schema"),
    (Misbehaviour(200, b'{"schema": "{}", "references": "x"}'), "not a schema"),
    (Misbehaviour(400, b'{"error_code": 400, "message": "bad request"}'), "refused the lookup (400: 400 bad request)"),
    (Misbehaviour(422, b'{"error_code": 42202, "message": "Invalid schema"}'), "refused the lookup (422"),
    (Misbehaviour(200, SCHEMA_TEXT[:-1].encode() + b" " * 300_000 + b"}"), "more than the 262144 bytes"),
    (Misbehaviour(200, SCHEMA_TEXT[:-1].encode() + b" " * 20_000_000 + b"}", gzip=True), "more than the 262144 bytes"),
    (Misbehaviour(200, b'{"schema": '), "unavailable"),
    (Misbehaviour(200, b"<html>proxy</html>", content_type="text/html"), "unavailable"),
    (Misbehaviour(404, b"<html>no such page</html>", content_type="text/html"), "unavailable"),
    (Misbehaviour(404, b'{"error_code": 404, "message": "HTTP 404 Not Found"}'), "unavailable"),
    (Misbehaviour(302, b""), "unavailable"),
    (Misbehaviour(500, b'{"error_code": 50001, "message": "store failed"}'), "unavailable"),
], ids=["list", "null", "references-only", "references-not-a-list", "400", "422", "over-the-cap", "gzip-bomb",
        "malformed-json", "not-json", "404-not-the-api", "404-no-such-route", "redirect", "500"])
def test_every_answer_is_a_schema_poison_or_unavailable(handler, registry, dead_letter, store, answer, outcome):
    good = registry.register("AVRO", json.dumps(ORDER_V1))
    odd = registry.register("AVRO", json.dumps({**ORDER_V1, "doc": "served oddly"}))
    registry.misbehave(f"/schemas/ids/{odd}", answer)
    records = [record(0, _value(good, "A1")), record(1, _value(odd, "A2")), record(2, _value(good, "A3"))]
    response = invoke(handler(), records)
    if outcome == "unavailable":
        assert failed_offsets(response) == [1, 2] and not dead_letters(dead_letter)
        assert _stored(store) == ["A1"]
    else:
        assert response == {"batchItemFailures": []}
        [entry] = dead_letters(dead_letter)
        assert (entry["source"]["offset"], entry["reason"], entry["schema_id"]) == (1, "unknown_schema", str(odd))
        assert outcome in entry["detail"]
        assert _stored(store) == ["A1", "A3"]


@pytest.mark.timeout(60)
def test_a_lookup_has_one_deadline_however_slowly_the_answer_comes(handler, registry, dead_letter, store):
    good = registry.register("AVRO", json.dumps(ORDER_V1))
    registry.misbehave(f"/schemas/ids/{good}*", Misbehaviour(200, SCHEMA_TEXT.encode() + b" " * 600,
                                                             drip_seconds=0.1))  # a minute, a byte at a time
    module = handler(SCHEMA_REGISTRY_TIMEOUT_SECONDS="1")
    started = time.monotonic()
    response = invoke(module, [record(0, _value(good, "A1"))])
    assert time.monotonic() - started < 5  # the 1 s deadline, not a read timeout per byte
    assert failed_offsets(response) == [0] and not dead_letters(dead_letter)


# -- credentials ------------------------------------------------------------------------------------


def test_registry_credentials_over_plain_http_are_refused_by_name(handler, monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    with mock_aws():
        arn = boto3.client("secretsmanager").create_secret(
            Name="registry", SecretString=json.dumps({"username": "key-1", "password": "pw-1"}))["ARN"]
        module = handler(SCHEMA_REGISTRY_SECRET_ARN=arn)
        with pytest.raises(ConfigurationError) as refused:
            invoke(module, [record(0, _value(1, "A1"))])
    assert "CONSOLIDATOR_SCHEMA_REGISTRY_URL: with CONSOLIDATOR_SCHEMA_REGISTRY_SECRET_ARN set it must be https://" \
        in str(refused.value)
