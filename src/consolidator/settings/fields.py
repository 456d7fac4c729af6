"""What an event is made of: the field names of the reference shape, the largest event taken, and
the event shape (``AGGREGATE``, ``MEMBER_PAYLOAD``, docs/events.md). :class:`FieldNames` is the one
object that carries the compiled shape to every runtime."""

from __future__ import annotations

from pydantic import Field, field_validator

from consolidator.rules.events import FieldNames
from consolidator.rules.shape import (
    REFERENCE_SHAPE,
    Shape,
    default_outputs,
    parse_outputs,
    parse_payload,
)
from consolidator.rules.shape_spec import parse_path
from consolidator.settings.base import SPARK_COMMANDS, Root, reaches
from consolidator.settings.loading import NAMES_ITS_FAULTS

_EVERYWHERE = reaches(deployed=True, spark=SPARK_COMMANDS)


class _Fields(Root):
    group_key_field: str = Field(
        "location_id", min_length=1, json_schema_extra=_EVERYWHERE,
        description="JSON field holding the group key (the Kafka key of the output)")
    item_id_field: str = Field(
        "order_id", min_length=1, json_schema_extra=_EVERYWHERE,
        description="JSON field identifying an item; repeated events for it coalesce")
    items_field: str = Field(
        "items", min_length=1, json_schema_extra=_EVERYWHERE,
        description="JSON list of items aggregated by the batch")
    sku_field: str = Field("sku", min_length=1, json_schema_extra=_EVERYWHERE, description="item field summed by")
    quantity_field: str = Field(
        "quantity", min_length=1, json_schema_extra=_EVERYWHERE, description="item quantity (integer >= 0)")
    max_event_bytes: int = Field(  # at most Lambda's payload limit
        256 * 1024, gt=0, le=6 * 1024 * 1024, json_schema_extra=_EVERYWHERE,
        description="larger values are poison (too_large)")
    event_time_field: str | None = Field(
        None, min_length=1, json_schema_extra=reaches(deployed=True),
        description="the path of each event's own time in its value (epoch ms or ISO-8601 with a zone): it drives"
                    " the TTL, the buffer's month and the batch's event times, and a value without it is poison"
                    " (`bad_event_time`); unset: the Kafka record timestamp",
    )

    # The event shape (docs/events.md): both unset keep the version 1 message.
    aggregate: str | None = Field(
        None, min_length=1, json_schema_extra=reaches(deployed=True, spark=SPARK_COMMANDS, **{NAMES_ITS_FAULTS: True}),
        description="the batch's outputs: a JSON list of {name, op, path} (op count, sum, min, max, first, last,"
                    " distinct, group_sum with by and sum), inline or the path of a JSON file (inline in a CDK"
                    " environment file); set, the message is version 2 (docs/events.md); unset: quantity summed"
                    " per sku",
    )
    member_payload: str = Field(
        "none", min_length=1, json_schema_extra=_EVERYWHERE,
        description="what each member of a batch carries of its newest event: none, full, or a JSON list of paths"
                    ' (["user_id", "props.page"]); other than none, the message is version 2',
    )

    @field_validator("aggregate")
    @classmethod
    def _aggregate_parses(cls, value: str | None) -> str | None:
        if value is not None:
            parse_outputs(value)
        return value

    @field_validator("event_time_field")
    @classmethod
    def _event_time_is_a_path(cls, value: str | None) -> str | None:
        if value is not None:
            parse_path(value)
        return value

    @field_validator("member_payload")
    @classmethod
    def _payload_parses(cls, value: str) -> str:
        parse_payload(value)
        return value

    def shape(self) -> Shape:
        """The compiled event shape: the one place that decides whether it is the reference shape
        (neither an aggregation spec nor a member payload: the version 1 message)."""
        if self.aggregate is None and self.member_payload == "none":
            return REFERENCE_SHAPE
        outputs = (parse_outputs(self.aggregate) if self.aggregate is not None
                   else default_outputs(self.items_field, self.sku_field, self.quantity_field))
        full, paths = parse_payload(self.member_payload)
        return Shape(outputs, full, paths)

    def field_names(self) -> FieldNames:
        return FieldNames(
            group_key=self.group_key_field,
            item_id=self.item_id_field,
            items=self.items_field,
            sku=self.sku_field,
            quantity=self.quantity_field,
            shape=self.shape(),
            event_time=None if self.event_time_field is None else parse_path(self.event_time_field),
        )
