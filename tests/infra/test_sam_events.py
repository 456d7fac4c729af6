"""The sample events of events/ have the shape of the events Lambda sends: the SQS and scheduled
samples have every key of what ``sam local generate-event`` produces for their source, with the
same JSON types (a key SAM's event lacks is allowed only where Powertools' model of that event
declares it), and every sample passes Powertools' parser model of its source. The SAM CLI
generates no Kafka event (none in 1.170): the MSK samples are held to Powertools'
``KafkaMskEventModel`` alone, with no key that model does not declare."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path

import pytest
from aws_lambda_powertools.utilities.parser.models import (
    EventBridgeModel,
    KafkaMskEventModel,
    SqsModel,
)
from aws_lambda_powertools.utilities.parser.models.kafka import KafkaRecordModel
from pydantic import BaseModel, ValidationError

pytestmark = pytest.mark.sam

EVENTS = Path(__file__).resolve().parents[2] / "events"
SAMPLES = sorted(p.name for p in EVENTS.glob("*.json"))
SAM_GENERATED = {"sqs": ("sqs", "receive-message"), "scheduled": ("cloudwatch", "scheduled-event")}
MODELS: dict[str, type[BaseModel]] = {"sqs": SqsModel, "scheduled": EventBridgeModel, "msk": KafkaMskEventModel}


def source_of(event: dict) -> str:
    if event.get("eventSource") == "aws:kafka":
        return "msk"
    if event.get("source") == "aws.events" and event.get("detail-type") == "Scheduled Event":
        return "scheduled"
    records = event.get("Records")
    if isinstance(records, list) and records and all(r.get("eventSource") == "aws:sqs" for r in records):
        return "sqs"
    raise AssertionError(f"not an MSK, SQS or scheduled event (keys {sorted(event)})")


def _json_type(value: object) -> str:
    for name, kind in (("null", type(None)), ("boolean", bool), ("integer", int), ("number", float),
                       ("string", str), ("array", list), ("object", dict)):
        if isinstance(value, kind):
            return name
    raise TypeError(type(value))


def _keys(model: type[BaseModel]) -> set[str]:
    return {f.alias or name for name, f in model.model_fields.items()}


def shape_mismatches(sample: object, reference: object, path: str = "$",
                     extra: frozenset[str] = frozenset()) -> list[str]:
    """Where ``sample`` lacks a key of ``reference``, has another JSON type, or has a key the
    reference lacks (``extra`` names the top-level keys allowed anyway)."""
    if _json_type(sample) != _json_type(reference):
        return [f"{path}: {_json_type(sample)} where SAM's event has {_json_type(reference)}"]
    problems = []
    if isinstance(sample, dict):
        for key in reference:
            if key not in sample:
                problems.append(f"{path}.{key}: missing (SAM's event has it)")
            else:
                problems += shape_mismatches(sample[key], reference[key], f"{path}.{key}")
        problems += [f"{path}.{key}: not in SAM's event nor in Powertools' model" for key in sample
                     if key not in reference and key not in extra]
    elif isinstance(sample, list) and reference:
        for i, item in enumerate(sample):
            problems += shape_mismatches(item, reference[0], f"{path}[{i}]")
    return problems


def msk_mismatches(event: dict) -> list[str]:
    """What Powertools' model of the MSK event does not check: no undeclared key, integer
    positions, and each record under its ``<topic>-<partition>`` key."""
    problems = [f"$.{key}: not in Powertools' KafkaMskEventModel" for key in event
                if key not in _keys(KafkaMskEventModel)]
    for group, records in event.get("records", {}).items():
        for i, record in enumerate(records):
            path = f"$.records.{group}[{i}]"
            problems += [f"{path}.{key}: not in Powertools' KafkaRecordModel" for key in record
                         if key not in _keys(KafkaRecordModel)]
            problems += [f"{path}.{key}: {_json_type(record.get(key))} where Lambda sends an integer"
                         for key in ("partition", "offset", "timestamp") if _json_type(record.get(key)) != "integer"]
            if group != f"{record.get('topic')}-{record.get('partition')}":
                problems.append(f"{path}: under {group!r}, not under its '<topic>-<partition>'")
    return problems


def _values_as_base64(event: dict) -> tuple[dict, list[str]]:
    """The MSK event with every record value checked as base64 and replaced by an empty one:
    Powertools' model also decodes values as UTF-8 text, but a Kafka value is bytes (the poison
    sample's are not UTF-8 on purpose)."""
    event, problems = copy.deepcopy(event), []
    for group, records in event.get("records", {}).items():
        for i, record in enumerate(records):
            try:
                base64.b64decode(record.get("value"), validate=True)
                record["value"] = ""
            except (TypeError, ValueError):
                problems.append(f"$.records.{group}[{i}].value: not base64")
    return event, problems


def check_sample(event: dict, generated: dict[str, dict]) -> list[str]:
    kind = source_of(event)
    checked, problems = _values_as_base64(event) if kind == "msk" else (copy.deepcopy(event), [])
    try:
        MODELS[kind].model_validate(checked)  # (its validators decode in place: a copy)
    except ValidationError as error:
        problems += [f"$.{'.'.join(map(str, e['loc']))}: {e['msg']} (Powertools' {MODELS[kind].__name__})"
                    for e in error.errors()]
    if kind in generated:
        problems += shape_mismatches(event, generated[kind], extra=frozenset(_keys(MODELS[kind])))
    if kind == "msk":
        problems += msk_mismatches(event)
    return problems


@pytest.fixture(scope="module")
def generated() -> dict[str, dict]:
    import sam_local

    return {kind: sam_local.generate_event(*command) for kind, command in SAM_GENERATED.items()}


def test_the_samples_cover_every_source():
    assert {source_of(json.loads((EVENTS / name).read_text())) for name in SAMPLES} == set(MODELS)


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_has_the_shape_of_the_event_lambda_sends(name, generated):
    assert check_sample(json.loads((EVENTS / name).read_text()), generated) == []


def _sqs_timestamp_as_number(event):
    event["Records"][0]["attributes"]["SentTimestamp"] = 1795000000000


def _sqs_without_md5(event):
    del event["Records"][1]["md5OfBody"]


def _scheduled_without_detail_type(event):
    del event["detail-type"]
    event["source"] = "aws.events"


def _scheduled_with_resources_as_string(event):
    event["resources"] = event["resources"][0]


def _msk_without_bootstrap_servers(event):
    del event["bootstrapServers"]


def _msk_partition_as_string(event):
    group = next(iter(event["records"]))
    event["records"][group][0]["partition"] = str(event["records"][group][0]["partition"])


def _msk_value_not_base64(event):
    group = next(iter(event["records"]))
    event["records"][group][1]["value"] = "not base64!"


def _msk_misspelled_key(event):
    group = next(iter(event["records"]))
    event["records"][group][0]["timestamp_type"] = event["records"][group][0].pop("timestampType")


@pytest.mark.parametrize(("name", "breaks", "expected"), [
    ("sqs-acks.json", _sqs_timestamp_as_number,
     "$.Records[0].attributes.SentTimestamp: integer where SAM's event has string"),
    ("sqs-acks.json", _sqs_without_md5, "$.Records[1].md5OfBody: missing (SAM's event has it)"),
    ("scheduled-flush.json", _scheduled_with_resources_as_string, "$.resources: string where SAM's event has array"),
    ("msk-orders.json", _msk_without_bootstrap_servers, "$.bootstrapServers: Field required"),
    ("msk-orders.json", _msk_partition_as_string, ".partition: string where Lambda sends an integer"),
    ("msk-poison-mix.json", _msk_value_not_base64, "$.records.orders.poison-mix-0[1].value: not base64"),
    ("msk-poison-mix.json", _msk_misspelled_key, ".timestamp_type: not in Powertools' KafkaRecordModel"),
])
def test_a_broken_sample_is_reported_where_it_breaks(name, breaks, expected, generated):
    event = json.loads((EVENTS / name).read_text())
    assert check_sample(event, generated) == []
    breaks(event)
    problems = check_sample(event, generated)
    assert any(expected in p for p in problems), problems


def test_a_scheduled_sample_without_its_detail_type_is_not_taken_for_a_scheduled_event(generated):
    event = json.loads((EVENTS / "scheduled-cleanup.json").read_text())
    _scheduled_without_detail_type(event)
    with pytest.raises(AssertionError, match="not an MSK, SQS or scheduled event"):
        check_sample(event, generated)
