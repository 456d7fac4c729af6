"""The environment model: every shipped environment loads; bad input fails with named fields."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "infra"))

from consolidator_infra.config import ConfigError, environment_names, load_environment
from consolidator_infra.config_sink import EventBridgeSinkConfig, SqsSinkConfig

pytestmark = pytest.mark.infra


def test_shipped_environments_load():
    assert {"dev", "staging", "prod"} <= set(environment_names())
    for name in environment_names():
        config = load_environment(name)
        assert config.name == name
        assert config.msk.retry_attempts >= 0 and config.msk.max_record_age_seconds > 0
    assert load_environment("prod").database.deletion_protection is True
    assert load_environment("prod").removal_policy == "retain"


def _write(tmp_path: Path, name: str, **changes) -> Path:
    data = json.loads(load_environment("dev").model_dump_json())
    data["name"] = name
    for dotted, value in changes.items():
        target = data
        *parents, leaf = dotted.split("__")
        for part in parents:
            target = target[part]
        target[leaf] = value
    (tmp_path / f"{name}.json").write_text(json.dumps(data))
    return tmp_path


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"msk__cluster_arn": "arn:aws:kafka:eu-west-1:1:cluster"}, "msk.cluster_arn"),
        ({"msk__maximum_pollers": 1, "msk__minimum_pollers": 3}, "maximum_pollers must be >= minimum_pollers"),
        ({"msk__retry_attempts": -1}, "msk.retry_attempts"),
        ({"region": "us-east-1"}, "is in eu-west-1"),
        ({"account": "111111111111"}, "availability_zones is required"),
        ({"database__min_capacity": 8, "database__max_capacity": 2}, "max_capacity"),
        ({"functions__flush_timeout_seconds": 60}, "functions.flush_timeout_seconds"),
        ({"network__vpc_id": "vpc-0abc"}, "imported VPC needs"),
        ({"unknown": 1}, "unknown"),
        ({"completion__senders": []}, "completion.senders: List should have at least 1 item"),
        ({"completion__senders": ["*"]}, "completion.senders.0"),
        ({"completion__senders": ["arn:aws:iam::111111111111:root*"]}, "completion.senders.0"),
        ({"completion__max_concurrency": 1}, "completion.max_concurrency: Input should be greater than or equal to 2"),
        ({"completion__max_concurrency": 8, "completion__reserved_concurrency": 4}, "reserved_concurrency must be >="),
        ({"policy__aggregate": '[{"name": "n", "op": "avg", "path": "a"}]'}, "op must be one of"),
        ({"policy__aggregate": "specs/aggregate.json"}, "not a file path"),
        ({"policy__member_payload": "everything"}, "must be none, full or a JSON list of paths"),
    ],
)
def test_invalid_environment_names_the_field(tmp_path, changes, message):
    directory = _write(tmp_path, "bad", **changes)
    with pytest.raises(ConfigError, match="bad.json") as error:
        load_environment("bad", directory)
    assert message in str(error.value)


def test_missing_environment_file(tmp_path):
    with pytest.raises(ConfigError, match="no environment file nope.json"):
        load_environment("nope", tmp_path)


def test_sink_urls():
    config = load_environment("dev")
    assert config.sink_url().startswith("kafka://") and config.sink_url().endswith("?auth=iam&region=eu-west-1")
    sqs = config.model_copy(update={"sink": SqsSinkConfig(queue_arn="arn:aws:sqs:eu-west-1:111111111111:batches")})
    assert sqs.sink_url() == "sqs://sqs.eu-west-1.amazonaws.com/111111111111/batches"
    bus = config.model_copy(update={"sink": EventBridgeSinkConfig(
        event_bus_arn="arn:aws:events:eu-west-1:111111111111:event-bus/orders")})
    assert bus.sink_url() == "events://orders?source=consolidator"


def test_runbook_links_need_an_absolute_base_url(tmp_path):
    directory = _write(tmp_path, "bad", alarms__runbook_base_url="README.md#alarms")
    with pytest.raises(ConfigError, match="alarms.runbook_base_url"):
        load_environment("bad", directory)
    data = json.loads((directory / "bad.json").read_text())
    del data["alarms"]["runbook_base_url"]
    (directory / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="alarms.runbook_base_url"):
        load_environment("bad", directory)


def test_the_event_shape_of_an_environment_reaches_the_ingest_and_flush_functions(tmp_path):
    from app import create_app
    from aws_cdk.assertions import Template
    from consolidator_infra.stage import ConsolidatorStage

    spec = '[{"name": "n", "op": "count"}]'
    config = load_environment("shaped", _write(tmp_path, "shaped", policy__aggregate=spec,
                                               policy__member_payload='["user_id"]'))
    stage = ConsolidatorStage(create_app(outdir=str(tmp_path / "cdk.out")), config)
    functions = Template.from_stack(stage.stack).find_resources("AWS::Lambda::Function")
    shaped = {}
    for resource in functions.values():
        variables = resource["Properties"].get("Environment", {}).get("Variables", {})
        if "CONSOLIDATOR_AGGREGATE" in variables:
            shaped[variables["CONSOLIDATOR_AGGREGATE"]] = variables["CONSOLIDATOR_MEMBER_PAYLOAD"]
            assert "CONSOLIDATOR_ITEM_ID_FIELD" in variables  # the functions that decode or build batches
    assert shaped == {spec: '["user_id"]'}
    assert sum("CONSOLIDATOR_AGGREGATE" in r["Properties"].get("Environment", {}).get("Variables", {})
               for r in functions.values()) == 2  # ingest and flush


def test_the_event_time_field_of_an_environment_reaches_the_ingest_and_flush_functions(tmp_path):
    from app import create_app
    from aws_cdk.assertions import Template
    from consolidator_infra.stage import ConsolidatorStage

    config = load_environment("timed", _write(tmp_path, "timed", policy__event_time_field="meta.at"))
    stage = ConsolidatorStage(create_app(outdir=str(tmp_path / "cdk.out")), config)
    functions = Template.from_stack(stage.stack).find_resources("AWS::Lambda::Function")
    timed = [r["Properties"]["Environment"]["Variables"] for r in functions.values()
             if "CONSOLIDATOR_EVENT_TIME_FIELD" in r["Properties"].get("Environment", {}).get("Variables", {})]
    assert [v["CONSOLIDATOR_EVENT_TIME_FIELD"] for v in timed] == ["meta.at", "meta.at"]  # ingest and flush
    with pytest.raises(ConfigError, match="event_time_field"):
        load_environment("bad", _write(tmp_path, "bad", policy__event_time_field="a..b"))
