"""The value-format settings: one schema source for a registry format, none for JSON."""

from __future__ import annotations

import pytest

from consolidator.rules.errors import ConfigurationError
from consolidator.settings import IngestSettings, ReplaySettings, StreamSettings, load_settings

BASE = {"DATABASE_URL": "mysql://root:@127.0.0.1:3306/x", "DEAD_LETTER_URL": "file:///tmp/dlq.jsonl"}
ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:registry-AbCdEf"


def load(**values: str) -> IngestSettings:
    return load_settings(IngestSettings, environ={f"CONSOLIDATOR_{k}": v for k, v in (BASE | values).items()})


def test_json_is_the_default_and_builds_no_decoder():
    settings = load()
    assert settings.value_format == "json" and settings.value_decoder() is None


@pytest.mark.parametrize("model", [IngestSettings, StreamSettings, ReplaySettings])
def test_every_runtime_that_decodes_events_declares_the_format(model):
    assert {"value_format", "schema_registry_url", "glue_registry_name"} <= set(model.model_fields)


@pytest.mark.parametrize("values, message", [
    ({"VALUE_FORMAT": "avro"}, "CONSOLIDATOR_GLUE_REGISTRY_NAME: VALUE_FORMAT avro needs exactly one"),
    ({"VALUE_FORMAT": "avro", "SCHEMA_REGISTRY_URL": "http://r:8081", "GLUE_REGISTRY_NAME": "g"}, "exactly one"),
    ({"SCHEMA_REGISTRY_URL": "http://r:8081"}, "CONSOLIDATOR_SCHEMA_REGISTRY_URL: VALUE_FORMAT json reads no schema registry"),
    ({"VALUE_FORMAT": "xml"}, "CONSOLIDATOR_VALUE_FORMAT: Input should be 'json', 'avro'"),
    ({"VALUE_FORMAT": "avro", "SCHEMA_REGISTRY_URL": "http://user:pw@r:8081"},
     "CONSOLIDATOR_SCHEMA_REGISTRY_URL: String should match pattern"),
    ({"VALUE_FORMAT": "protobuf", "GLUE_REGISTRY_NAME": "g"}, "event source mapping"),
    ({"VALUE_FORMAT": "avro", "GLUE_REGISTRY_NAME": "g", "SCHEMA_REGISTRY_SECRET_ARN": ARN}, "CONSOLIDATOR_SCHEMA_REGISTRY_SECRET_ARN: it is for"),
    ({"VALUE_FORMAT": "avro", "GLUE_REGISTRY_NAME": "g", "SCHEMA_REGISTRY_TIMEOUT_SECONDS": "0"},
     "CONSOLIDATOR_SCHEMA_REGISTRY_TIMEOUT_SECONDS: Input should be greater than or equal to 0.001"),
    ({"VALUE_FORMAT": "avro", "SCHEMA_REGISTRY_URL": "http://r:8081", "SCHEMA_REGISTRY_SECRET_ARN": ARN},
     "CONSOLIDATOR_SCHEMA_REGISTRY_URL: with CONSOLIDATOR_SCHEMA_REGISTRY_SECRET_ARN set it must be https://"),
    ({"VALUE_FORMAT": "avro", "GLUE_REGISTRY_NAME": "g", "SCHEMA_SUBJECTS": "orders-value"},
     "CONSOLIDATOR_SCHEMA_SUBJECTS"),
    ({"VALUE_FORMAT": "avro", "GLUE_REGISTRY_NAME": "g", "SCHEMA_SUBJECTS": "[]"},
     "CONSOLIDATOR_SCHEMA_SUBJECTS: List should have at least 1 item"),
    ({"VALUE_FORMAT": "avro", "GLUE_REGISTRY_NAME": "g", "SCHEMA_SUBJECTS": '["a\\u001bb"]'},
     "CONSOLIDATOR_SCHEMA_SUBJECTS"),
    ({"SCHEMA_SUBJECTS": '["orders-value"]'}, "CONSOLIDATOR_SCHEMA_SUBJECTS: VALUE_FORMAT json reads no schema registry"),
    ({"VALUE_FORMAT": "avro", "GLUE_REGISTRY_NAME": "g", "SCHEMA_REGISTRY_MAX_LOOKUPS": "0"},
     "CONSOLIDATOR_SCHEMA_REGISTRY_MAX_LOOKUPS: Input should be greater than or equal to 1"),
])
def test_bad_format_settings_are_refused_by_name(values, message):
    with pytest.raises(ConfigurationError) as caught:
        load(**values)
    assert message in str(caught.value)
    assert "pw" not in str(caught.value)


@pytest.mark.parametrize("values", [
    {"VALUE_FORMAT": "avro", "SCHEMA_REGISTRY_URL": "https://psrc-1.eu-west-1.aws.confluent.cloud",
     "SCHEMA_REGISTRY_SECRET_ARN": ARN, "SCHEMA_SUBJECTS": '["orders-value", "orders.Order"]'},
    {"VALUE_FORMAT": "json-schema", "GLUE_REGISTRY_NAME": "shop-registry"},
    {"VALUE_FORMAT": "protobuf", "SCHEMA_REGISTRY_URL": "http://127.0.0.1:8081/"},
])
def test_good_format_settings_load(values):
    assert load(**values).value_format == values["VALUE_FORMAT"]


def test_ingest_counts_lookups_per_invocation_and_gives_them_half_the_function_timeout():
    spec = load(VALUE_FORMAT="avro", GLUE_REGISTRY_NAME="g", FUNCTION_TIMEOUT_SECONDS="60",
                SCHEMA_SUBJECTS='["orders"]').value_format_spec()
    assert (spec.max_lookups, spec.lookup_seconds, spec.subjects) == (10, 30.0, ("orders",))
    assert load(VALUE_FORMAT="avro", GLUE_REGISTRY_NAME="g").value_format_spec().lookup_seconds is None


def test_a_spark_job_has_no_invocation_to_count_lookups_in():
    spec = load_settings(ReplaySettings, environ={"CONSOLIDATOR_VALUE_FORMAT": "avro",
                                                  "CONSOLIDATOR_GLUE_REGISTRY_NAME": "g"}).value_format_spec()
    assert (spec.max_lookups, spec.lookup_seconds) == (None, None)
