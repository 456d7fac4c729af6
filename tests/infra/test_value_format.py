"""msk.schema_registry in an environment file: the event source mapping decodes (its schema
registry configuration, provisioned mode, an on-failure destination; the function reads JSON)
or the ingest function does (its format settings and read access to the registry)."""

from __future__ import annotations

import json

import pytest
from consolidator_infra.config import ConfigError, load_environment
from test_config import _write

pytestmark = pytest.mark.infra

GLUE = "arn:aws:glue:eu-west-1:111111111111:registry/shop"
SECRET = "arn:aws:secretsmanager:eu-west-1:111111111111:secret:registry-AbCdEf"
URL = "https://psrc-1.eu-west-1.aws.confluent.cloud"


CONFLUENT = {"value_format": "avro", "confluent_url": "https://registry.internal.example:8081",
             "confluent_secret_arn": SECRET}
NARROW = CONFLUENT | {"subjects": ["orders-value", "orders-v2-value"]}
#: environment name -> its msk.schema_registry; every one is synthesized (module fixture below)
REGISTRIES = {
    "esm": {"value_format": "protobuf", "decode_in": "event_source_mapping", "glue_registry_arn": GLUE},
    "glue": {"value_format": "avro", "glue_registry_arn": GLUE},
    "fn": CONFLUENT,
    "narrow": NARROW,
    "narrow-cidr": NARROW | {"confluent_cidr": "192.168.7.0/24"},
}


@pytest.fixture(scope="module")
def synthesized_registries(tmp_path_factory) -> dict:
    """Environment name -> (stack, template), every environment of :data:`REGISTRIES` a stage of
    one app synthesized once (a synth of its own took 4-7 s per test; the tests only read them)."""
    from app import create_app
    from aws_cdk.assertions import Template
    from consolidator_infra.stage import ConsolidatorStage

    directory = tmp_path_factory.mktemp("registries")
    app = create_app(outdir=str(directory / "cdk.out"))
    stages = {name: ConsolidatorStage(app, load_environment(name, _write(directory, name,
                                                                         msk__schema_registry=registry)))
              for name, registry in REGISTRIES.items()}
    assembly = app.synth()
    return {name: (stage.stack, Template.from_json(
                assembly.get_nested_assembly(stage.artifact_id).get_stack_artifact(stage.stack.artifact_id).template))
            for name, stage in stages.items()}


@pytest.fixture
def synthesized_registry(synthesized_registries):
    """The (stack, template) of one environment of :data:`REGISTRIES`; no cdk-nag finding on it."""
    def get(name: str):
        stack, template = synthesized_registries[name]
        _no_nag_findings(stack)
        return stack, template
    return get


def _no_nag_findings(stack) -> None:
    from aws_cdk.assertions import Annotations, Match

    annotations = Annotations.from_stack(stack)
    findings = [*annotations.find_error("*", Match.string_like_regexp("AwsSolutions-.*")),
                *annotations.find_warning("*", Match.string_like_regexp("AwsSolutions-.*"))]
    assert [(f.id, str(f.entry.data)[:120]) for f in findings] == []


def _ingest(stack, template):
    ingest = {"Ref": stack.resolve(stack.ingest.node.default_child.logical_id)}
    [mapping] = [r["Properties"] for r in template.find_resources("AWS::Lambda::EventSourceMapping").values()
                 if r["Properties"]["FunctionName"] == ingest]
    [function] = [r["Properties"] for key, r in template.find_resources("AWS::Lambda::Function").items()
                  if key == ingest["Ref"]]
    role = stack.resolve(stack.ingest.role.node.default_child.logical_id)
    statements = [s for p in template.find_resources("AWS::IAM::Policy").values() if {"Ref": role} in
                  p["Properties"]["Roles"] for s in p["Properties"]["PolicyDocument"]["Statement"]]
    return mapping, function["Environment"]["Variables"], statements


def test_the_mapping_decodes_with_glue_and_hands_the_function_json(synthesized_registry):
    stack, template = synthesized_registry("esm")
    mapping, variables, _ = _ingest(stack, template)
    assert mapping["AmazonManagedKafkaEventSourceConfig"]["SchemaRegistryConfig"] == {
        "EventRecordFormat": "JSON", "SchemaRegistryURI": GLUE, "SchemaValidationConfigs": [{"Attribute": "VALUE"}]}
    assert mapping["ProvisionedPollerConfig"]["MinimumPollers"] >= 1  # the registry needs provisioned mode
    assert "OnFailure" in mapping["DestinationConfig"]  # a record the mapping refuses is not dropped
    assert "CONSOLIDATOR_VALUE_FORMAT" not in variables  # the function reads the JSON it is handed


def test_the_function_decodes_with_glue_reading_only_that_registrys_schemas(synthesized_registry):
    stack, template = synthesized_registry("glue")
    _, variables, statements = _ingest(stack, template)
    assert (variables["CONSOLIDATOR_VALUE_FORMAT"], variables["CONSOLIDATOR_GLUE_REGISTRY_NAME"]) == ("avro", "shop")
    [glue] = [s for s in statements if s.get("Sid") == "ReadSchemaVersions"]
    assert glue["Action"] == "glue:GetSchemaVersion"
    assert glue["Resource"] == [GLUE, "arn:aws:glue:eu-west-1:111111111111:schema/shop/*"]


def test_the_function_decodes_with_a_confluent_registry_and_reads_its_secret(synthesized_registry):
    url = "https://registry.internal.example:8081"
    stack, template = synthesized_registry("fn")
    mapping, variables, statements = _ingest(stack, template)
    assert "SchemaRegistryConfig" not in mapping["AmazonManagedKafkaEventSourceConfig"]
    assert (variables["CONSOLIDATOR_VALUE_FORMAT"], variables["CONSOLIDATOR_SCHEMA_REGISTRY_URL"],
            variables["CONSOLIDATOR_SCHEMA_REGISTRY_SECRET_ARN"]) == ("avro", url, SECRET)
    assert {(rule["FromPort"], rule["Description"]) for rule in _egress(stack, template)} >= {
        (443, "HTTPS to AWS APIs"), (8081, "Schema registry")}
    assert any("secretsmanager:GetSecretValue" in s["Action"] and SECRET in json.dumps(s["Resource"])
               for s in statements)


def _egress(stack, template) -> list[dict]:
    group = stack.resolve(stack.ingest.connections.security_groups[0].node.default_child.logical_id)
    return template.to_json()["Resources"][group]["Properties"]["SecurityGroupEgress"]


@pytest.mark.parametrize("cidr", [None, "192.168.7.0/24"])
def test_the_registry_port_is_open_to_its_network_only_never_the_internet(synthesized_registry, cidr):
    stack, template = synthesized_registry("narrow-cidr" if cidr else "narrow")
    assert stack.config.msk.schema_registry.confluent_cidr == cidr
    [rule] = [rule for rule in _egress(stack, template) if rule["Description"] == "Schema registry"]
    assert (rule["FromPort"], rule["CidrIp"]) == (8081, cidr or stack.config.network.vpc_cidr)
    assert rule["CidrIp"] != "0.0.0.0/0"
    _, variables, _ = _ingest(stack, template)
    assert json.loads(variables["CONSOLIDATOR_SCHEMA_SUBJECTS"]) == ["orders-value", "orders-v2-value"]


@pytest.mark.parametrize("schema_registry, message", [
    ({"value_format": "avro"}, "exactly one of confluent_url and glue_registry_arn"),
    ({"value_format": "json", "glue_registry_arn": GLUE}, "leave msk.schema_registry out"),
    ({"value_format": "xml", "glue_registry_arn": GLUE}, "msk.schema_registry.value_format"),
    ({"value_format": "protobuf", "glue_registry_arn": GLUE}, "decode it in the event source mapping"),
    ({"value_format": "avro", "confluent_url": URL, "decode_in": "event_source_mapping"},
     "confluent_secret_arn is required"),
    ({"value_format": "avro", "glue_registry_arn": "arn:aws:glue:eu-west-1:1:registry/x"},
     "msk.schema_registry.glue_registry_arn"),
    ({"value_format": "avro", "confluent_url": "http://registry.internal:8081", "confluent_secret_arn": SECRET},
     "confluent_url must be https:// with confluent_secret_arn"),
    ({"value_format": "avro", "glue_registry_arn": GLUE, "subjects": []}, "msk.schema_registry.subjects"),
])
def test_a_bad_schema_registry_is_refused_by_field(tmp_path, schema_registry, message):
    with pytest.raises(ConfigError) as error:
        load_environment("bad", _write(tmp_path, "bad", msk__schema_registry=schema_registry))
    assert message in str(error.value)
