"""Ingest of Avro values against real MariaDB and a local schema registry: the same rows as the
same events in JSON, poison dead-lettered with its reason and schema id, a registry outage
reported as failures (retried, never dead-lettered), and the registry's credentials from
Secrets Manager, never logged."""

from __future__ import annotations

import base64
import json
import logging
import shutil

import boto3
import pytest
from format_values import ORDER_V1, ORDER_V2, avro_body, avro_serializer, confluent, order
from moto import mock_aws
from schema_registry import LocalSchemaRegistry, certificate
from support import record, sql

from consolidator.rules.events import FieldNames
from consolidator.services.ingest import IngestService, build_ingest_service
from consolidator.settings import IngestSettings, load_settings
from consolidator.sinks.deadletter import FileDeadLetter
from consolidator.sources.formats import RegistryValueDecoder
from consolidator.sources.formats.confluent import ConfluentRegistry
from consolidator.sources.msk import event_from_records

ROWS = "SELECT group_key, item_id, items, src_offset, merged_events FROM buffer_rows ORDER BY group_key, item_id"


@pytest.fixture
def registry():
    r = LocalSchemaRegistry()
    yield r
    r.stop()


def service(store, tmp_path, clock, values=None) -> IngestService:
    return IngestService(store, FileDeadLetter(tmp_path / "dlq.jsonl"), FieldNames(), 256 * 1024, clock,
                         values=values)


def failures(response: dict) -> list[tuple[str, int]]:
    return [(f["itemIdentifier"]["partition"], f["itemIdentifier"]["offset"]) for f in response["batchItemFailures"]]


DOCS = [order("WH-1", "A", (("S1", 1),)), order("WH-1", "B", (("S2", 2),)), order("WH-1", "A", (("S1", 5),)),
        order("WH-2", "C", (("S3", 0), ("S4", 2**40)))]


def test_avro_rows_equal_the_json_rows_of_the_same_events(registry, store, database_url, tmp_path, clock):
    serialize = avro_serializer(registry.url)
    avro = service(store, tmp_path, clock, RegistryValueDecoder("avro", ConfluentRegistry(registry.url)))
    response = avro.handle_msk_event(event_from_records([record(o, serialize(d)) for o, d in enumerate(DOCS)]))
    assert response == {"batchItemFailures": []}
    avro_rows = sql(store, ROWS)
    with store.transaction() as cur:  # the same store, emptied, takes the JSON events
        cur.execute("DELETE FROM buffer_rows")
        cur.execute("DELETE FROM partition_offsets")
    plain = service(store, tmp_path, clock)
    plain.handle_msk_event(event_from_records([record(o, json.dumps(d).encode()) for o, d in enumerate(DOCS)]))
    assert sql(store, ROWS) == avro_rows
    assert len(avro_rows) == 3 and registry.gets[1] == 1


def test_poison_is_dead_lettered_with_its_reason_and_schema_id(registry, store, tmp_path, clock):
    serialize = avro_serializer(registry.url)
    ingest = service(store, tmp_path, clock, RegistryValueDecoder("avro", ConfluentRegistry(registry.url)))
    records = [record(0, serialize(DOCS[0])), record(1, confluent(77, avro_body(DOCS[1]))),
               record(2, json.dumps(DOCS[1]).encode()), record(3, serialize(DOCS[1])[:-2]),
               record(4, serialize(DOCS[3]))]
    assert ingest.handle_msk_event(event_from_records(records)) == {"batchItemFailures": []}
    entries = FileDeadLetter(tmp_path / "dlq.jsonl").read()
    assert [(e["source"]["offset"], e["reason"], e.get("schema_id")) for e in entries] == [
        (1, "unknown_schema", "77"), (2, "bad_wire_format", None), (3, "undecodable_value", "1")]
    assert base64.b64decode(entries[0]["value_b64"]) == records[1].value  # the value as received
    assert [r["item_id"] for r in sql(store, ROWS)] == ["A", "C"]


def test_registry_outage_fails_records_without_dead_lettering_them(registry, store, tmp_path, clock):
    serialize = avro_serializer(registry.url)
    values = RegistryValueDecoder("avro", ConfluentRegistry(registry.url), timeout_s=1)
    ingest = service(store, tmp_path, clock, values)
    ingest.handle_msk_event(event_from_records([record(0, serialize(DOCS[0]), partition=1)]))  # schema 1 cached
    v2 = registry.register("AVRO", json.dumps(ORDER_V2))
    registry.status = 503
    batch = [
        record(0, confluent(v2, avro_body(DOCS[1] | {"channel": "app"}, ORDER_V2)), partition=0),
        record(1, b"not avro", partition=0),  # poison after the failure: waits, not dead-lettered
        record(2, serialize(DOCS[2]), partition=0),
        record(1, serialize(DOCS[3]), partition=1),  # schema 1 is cached: stored
    ]
    event = event_from_records(batch)
    assert failures(ingest.handle_msk_event(event)) == [("orders-0", 0), ("orders-0", 1), ("orders-0", 2)]
    assert not (tmp_path / "dlq.jsonl").exists()
    assert [r["item_id"] for r in sql(store, ROWS)] == ["A", "C"]
    registry.status = None
    values.cache.failures.clear()  # the retry period is over
    assert failures(ingest.handle_msk_event(event)) == []
    assert [e["source"]["offset"] for e in FileDeadLetter(tmp_path / "dlq.jsonl").read()] == [1]
    assert [r["item_id"] for r in sql(store, ROWS)] == ["A", "B", "C"]


@pytest.mark.skipif(not shutil.which("openssl"), reason="needs openssl")
def test_registry_credentials_come_from_the_secret_over_verified_tls_and_are_never_logged(
        store, database_url, tmp_path, clock, monkeypatch, caplog):
    authority, certificate_file, key = certificate(tmp_path)
    registry = LocalSchemaRegistry(tls=(str(certificate_file), str(key)))
    monkeypatch.setenv("SSL_CERT_FILE", str(authority))  # the registry's authority is the one trusted
    password = "pw-9f3e1c-never-in-logs"
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    try:
        with mock_aws():
            arn = boto3.client("secretsmanager").create_secret(
                Name="registry", SecretString=json.dumps({"username": "key-1", "password": password}))["ARN"]
            settings = load_settings(IngestSettings, environ={
                "CONSOLIDATOR_DATABASE_URL": database_url,
                "CONSOLIDATOR_DEAD_LETTER_URL": f"file://{tmp_path}/dlq.jsonl",
                "CONSOLIDATOR_VALUE_FORMAT": "avro", "CONSOLIDATOR_SCHEMA_REGISTRY_URL": registry.url,
                "CONSOLIDATOR_SCHEMA_REGISTRY_SECRET_ARN": arn})
            ingest = build_ingest_service(settings, clock=clock)
        assert registry.url.startswith("https://")
        value = confluent(registry.register("AVRO", json.dumps(ORDER_V1)), avro_body(DOCS[0]))
        assert ingest.handle_msk_event(event_from_records([record(0, value)])) == {"batchItemFailures": []}
        assert registry.auth == "Basic " + base64.b64encode(f"key-1:{password}".encode()).decode()
        registry.status = 401
        with caplog.at_level(logging.DEBUG):
            response = ingest.handle_msk_event(event_from_records([record(1, confluent(2, avro_body(DOCS[1])))]))
        assert failures(response) == [("orders-0", 1)]
        assert "schema registry" in caplog.text and password not in caplog.text and password not in repr(ingest)
    finally:
        registry.stop()


def test_a_registry_certificate_from_an_unknown_authority_is_refused(store, tmp_path, clock, monkeypatch):
    if not shutil.which("openssl"):
        pytest.skip("needs openssl")
    _, certificate_file, key = certificate(tmp_path)  # its authority is not trusted
    registry = LocalSchemaRegistry(tls=(str(certificate_file), str(key)))
    try:
        schema_id = registry.register("AVRO", json.dumps(ORDER_V1))
        ingest = service(store, tmp_path, clock, RegistryValueDecoder("avro", ConfluentRegistry(registry.url)))
        response = ingest.handle_msk_event(event_from_records([record(0, confluent(schema_id, avro_body(DOCS[0])))]))
        assert failures(response) == [("orders-0", 0)] and not (tmp_path / "dlq.jsonl").exists()
        assert not registry.paths  # nothing was asked of a server that could not prove who it is
    finally:
        registry.stop()


def test_redrive_decodes_with_the_registry_once_it_knows_the_schema(registry, store, tmp_path, clock):
    from consolidator.services.redrive import redrive_poison

    values = RegistryValueDecoder("avro", ConfluentRegistry(registry.url), timeout_s=1)
    ingest = service(store, tmp_path, clock, values)
    value = confluent(77, avro_body(DOCS[1]))
    assert ingest.handle_msk_event(event_from_records([record(0, value)])) == {"batchItemFailures": []}
    [entry] = FileDeadLetter(tmp_path / "dlq.jsonl").read()
    assert (entry["reason"], entry["schema_id"]) == ("unknown_schema", "77")

    registry.schemas[77] = {"schema": json.dumps(ORDER_V1)}  # registered since (a restored registry)
    registry.subjects[77] = {"orders-value"}
    registry.status = 503
    values.cache.failures.clear()
    report = redrive_poison([entry], ingest)
    assert (report.stored, report.still_poison, [f["offset"] for f in report.failed]) == (0, [], [0])
    registry.status = None
    values.cache.failures.clear()
    report = redrive_poison([entry], ingest)
    assert (report.stored, report.still_poison, report.failed) == (1, [], [])
    assert [r["item_id"] for r in sql(store, ROWS)] == ["B"]
