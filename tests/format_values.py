"""Real encodings of order events for the value-format tests: Avro through confluent-kafka's own
serializer, Protobuf and Glue frames built byte by byte from their specifications."""

from __future__ import annotations

import base64
import io
import json
import uuid
import zlib

import fastavro
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

ITEM = {"type": "record", "name": "Item", "fields": [
    {"name": "sku", "type": "string"}, {"name": "quantity", "type": "long"}]}
ORDER_V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "location_id", "type": "string"}, {"name": "order_id", "type": "string"},
    {"name": "items", "type": {"type": "array", "items": ITEM}}]}
# version 2 adds a field (with a default: a BACKWARD-compatible change)
ORDER_V2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "channel", "type": "string", "default": "web"}]}


def order(location="WH-42", order_id="A001", items=(("SKU-1", 2),), **extra) -> dict:
    return {"location_id": location, "order_id": order_id,
            "items": [{"sku": s, "quantity": q} for s, q in items], **extra}


def avro_serializer(registry_url: str, schema: dict = ORDER_V1, topic: str = "orders"):
    """confluent-kafka's AvroSerializer (it registers ``schema`` under ``<topic>-value`` on first use)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serializer = AvroSerializer(SchemaRegistryClient({"url": registry_url}), json.dumps(schema))
    context = SerializationContext(topic, MessageField.VALUE)
    return lambda document: serializer(document, context)


def avro_body(document: dict, schema: dict = ORDER_V1) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), document)
    return out.getvalue()


def order_proto() -> descriptor_pb2.FileDescriptorProto:
    """shop.Order { string location_id = 1; string order_id = 2; repeated Item items = 3;
    message Item { string sku = 1; int64 quantity = 2; } } (proto3)."""
    f = descriptor_pb2.FileDescriptorProto(name="order.proto", package="shop", syntax="proto3")
    string, int64, message = (descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                              descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
                              descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE)
    optional, repeated = (descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
                          descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED)
    m = f.message_type.add(name="Order")
    m.field.add(name="location_id", number=1, type=string, label=optional)
    m.field.add(name="order_id", number=2, type=string, label=optional)
    m.field.add(name="items", number=3, type=message, label=repeated, type_name=".shop.Order.Item")
    item = m.nested_type.add(name="Item")
    item.field.add(name="sku", number=1, type=string, label=optional)
    item.field.add(name="quantity", number=2, type=int64, label=optional)
    return f


def proto_schema_text(proto: descriptor_pb2.FileDescriptorProto) -> str:
    """How Confluent's Protobuf serializer registers a schema: base64 of the FileDescriptorProto."""
    return base64.b64encode(proto.SerializeToString()).decode()


def proto_classes(proto: descriptor_pb2.FileDescriptorProto):
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return (message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order")),
            message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order.Item")))


def proto_order(document: dict) -> bytes:
    order_class, _ = proto_classes(order_proto())
    message = order_class(location_id=document["location_id"], order_id=document["order_id"])
    for item in document["items"]:
        message.items.add(sku=item["sku"], quantity=item["quantity"])
    return message.SerializeToString()


def confluent(schema_id: int, body: bytes, indexes: bytes = b"") -> bytes:
    """Confluent wire format: magic 0, 4-byte id, (Protobuf) message indexes, body."""
    return b"\x00" + schema_id.to_bytes(4, "big") + indexes + body


def glue(version_id: str, body: bytes, compress: bool = False) -> bytes:
    """Glue wire format: header version 3, compression (0 or 5 = zlib), 16-byte version id, body."""
    return bytes([3, 5 if compress else 0]) + uuid.UUID(version_id).bytes + (zlib.compress(body) if compress else body)
