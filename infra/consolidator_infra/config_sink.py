"""The sink sections of an environment file: where batches (and completion messages) go, and the
sink URL (``consolidator.sinks.sink_from_url``) the functions are given for each."""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import quote

from pydantic import Field

from consolidator_infra.config_model import ConfigModel


class KafkaSinkConfig(ConfigModel):
    """Batches go to a topic on the same MSK cluster, IAM auth."""

    kind: Literal["kafka"] = "kafka"
    bootstrap_servers: str = Field(min_length=1, description="comma separated host:9098 list")
    topic: str = Field(min_length=1)


class SqsSinkConfig(ConfigModel):
    kind: Literal["sqs"] = "sqs"
    queue_arn: str = Field(pattern=r"^arn:aws[\w-]*:sqs:[a-z0-9-]+:\d{12}:[\w.-]+$")


class EventBridgeSinkConfig(ConfigModel):
    kind: Literal["events"] = "events"
    event_bus_arn: str = Field(pattern=r"^arn:aws[\w-]*:events:[a-z0-9-]+:\d{12}:event-bus/[\w./-]+$")
    source: str = "consolidator"


SinkConfig = Annotated[KafkaSinkConfig | SqsSinkConfig | EventBridgeSinkConfig, Field(discriminator="kind")]


def sink_url_of(sink: KafkaSinkConfig | SqsSinkConfig | EventBridgeSinkConfig, region: str) -> str:
    """The sink URL (``consolidator.sinks.sink_from_url``) of a configured destination."""
    if isinstance(sink, KafkaSinkConfig):
        return f"kafka://{sink.bootstrap_servers}/{sink.topic}?auth=iam&region={region}"
    if isinstance(sink, SqsSinkConfig):
        _, _, _, queue_region, account, name = sink.queue_arn.split(":", 5)
        return f"sqs://sqs.{queue_region}.amazonaws.com/{account}/{name}"
    bus = sink.event_bus_arn.split(":event-bus/", 1)[1]
    return f"events://{bus}?source={quote(sink.source)}"
