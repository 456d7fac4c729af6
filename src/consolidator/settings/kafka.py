"""The Kafka source: where the brokers are (shared by ``spark stream`` and the worker) and how the
worker's consumer connects, authenticates and joins its group.

Each setting is one typed field here; :meth:`_KafkaConsumer.consumer_config` turns them into the
librdkafka configuration of the worker's consumer. Secrets (the SASL password, the TLS key's
password, the pass-through map, which may hold an OAuth client secret) are ``SecretStr`` or
``repr=False``: they appear in no repr, log line, error message or ``--help``.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar, Literal, Self

from pydantic import Field, FilePath, SecretStr, field_validator, model_validator

from consolidator.rules.printable import echoed
from consolidator.settings.base import SECRET, Root, reaches
from consolidator.sources.msk import TOPIC, TOPIC_RULE

# librdkafka properties the worker sets itself: its offset handling depends on them (commits
# only of what is durable) or a typed setting owns them. The pass-through map may not set them.
WORKER_OWNED = {
    "enable.auto.commit": "the worker commits offsets itself, only of records made durable",
    "enable.auto.offset.store": "the worker stores offsets itself, only of records made durable",
    "group.id": "CONSOLIDATOR_KAFKA_GROUP_ID",
    "bootstrap.servers": "CONSOLIDATOR_KAFKA_BOOTSTRAP",
    "metadata.broker.list": "CONSOLIDATOR_KAFKA_BOOTSTRAP",
    "security.protocol": "CONSOLIDATOR_KAFKA_SECURITY_PROTOCOL",
    "sasl.mechanism": "CONSOLIDATOR_KAFKA_SASL_MECHANISM",
    "sasl.mechanisms": "CONSOLIDATOR_KAFKA_SASL_MECHANISM",
    "sasl.username": "CONSOLIDATOR_KAFKA_SASL_USERNAME",
    "sasl.password": "CONSOLIDATOR_KAFKA_SASL_PASSWORD",
    "ssl.ca.location": "CONSOLIDATOR_KAFKA_SSL_CA_LOCATION",
    "ssl.certificate.location": "CONSOLIDATOR_KAFKA_SSL_CERTIFICATE_LOCATION",
    "ssl.key.location": "CONSOLIDATOR_KAFKA_SSL_KEY_LOCATION",
    "ssl.key.password": "CONSOLIDATOR_KAFKA_SSL_KEY_PASSWORD",
    "group.protocol": "CONSOLIDATOR_KAFKA_GROUP_PROTOCOL",
    "partition.assignment.strategy": "CONSOLIDATOR_KAFKA_ASSIGNMENT_STRATEGY",
    "enable.partition.eof": "the worker's poll loop does not read end-of-partition events",
}
# Consumer defaults of the worker (the pass-through map may change them): a new group starts at
# the oldest record (nothing produced before the first start is skipped), and the prefetch queue
# is bounded, so a backlog of millions of records holds a few tens of MB (docs/guide/worker.md).
CONSUMER_DEFAULTS: dict[str, Any] = {
    "auto.offset.reset": "earliest",
    "queued.max.messages.kbytes": 16_384,
}
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")

PassThroughValue = str | int | float | bool


def parse_pass_through(text: str) -> dict[str, PassThroughValue]:
    """The JSON object of librdkafka properties; ValueError (never quoting a value) for one that
    is not JSON, not an object of strings, numbers and booleans, or sets a property the worker owns."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(value, dict):
        raise ValueError("must be a JSON object of librdkafka properties")  # noqa: TRY004 (pydantic reports ValueErrors)
    for key, item in value.items():
        if key in WORKER_OWNED:
            owner = WORKER_OWNED[key]
            raise ValueError(f"{key!r} may not be set here: "
                             + (f"use {owner}" if owner.startswith("CONSOLIDATOR_") else owner))
        if not re.fullmatch(r"[a-z][a-z0-9._]*", key):
            raise ValueError(f"{echoed(key)} is not a librdkafka property name")
        if not isinstance(item, str | int | float | bool):
            raise ValueError(f"{key!r}: a property's value is a string, a number or a boolean")  # noqa: TRY004
    return value


class _KafkaBootstrap(Root):
    kafka_bootstrap: str | None = Field(None, min_length=1, pattern=r"^\S+$",
                                        description="Kafka bootstrap servers of the source (host:port,...)",
                                        json_schema_extra=reaches(spark=("stream",), option="--bootstrap-servers"))


def parse_topics(value: str) -> tuple[list[str], str | None]:
    """``(names, None)`` for a comma-separated list of topic names, ``([], pattern)`` for one
    regular expression starting with ``^`` (librdkafka subscribes to every matching topic)."""
    if value.startswith("^"):
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"{echoed(value)} is not a regular expression: {exc}") from None
        return [], value
    names = [name.strip() for name in value.split(",")]
    bad = [name for name in names if not TOPIC.fullmatch(name)]
    if bad:
        raise ValueError(f"{echoed(bad[0])} is not a Kafka topic name ({TOPIC_RULE});"
                         " give names separated by commas, or one regular expression starting with ^")
    if len(set(names)) != len(names):
        raise ValueError("a topic is named twice")
    return names, None


class _KafkaConsumer(_KafkaBootstrap):
    """How the worker's consumer reads the source: topics, group, TLS, SASL, pass-through."""

    REQUIRED_SETTINGS: ClassVar[tuple[str, ...]] = ("kafka_bootstrap",)  # optional for spark stream only

    source_topics: str = Field(
        min_length=1, max_length=10_000,
        description="the topics the worker consumes: names separated by commas, or one regular expression"
                    " starting with ^ (every matching topic, also ones created later)")
    kafka_group_id: str = Field(
        "consolidator", min_length=1, max_length=255, pattern=r"^[A-Za-z0-9._-]+$",
        description="the consumer group of the workers; partitions are shared among its members")
    kafka_group_protocol: Literal["classic", "consumer"] = Field(
        "classic", description="classic: the client-side rebalance protocol; consumer: KIP-848's"
                               " broker-side protocol (Kafka 4.0 brokers; faster rebalances)")
    kafka_assignment_strategy: Literal["cooperative-sticky", "range", "roundrobin"] = Field(
        "cooperative-sticky", description="partition assignment of the classic protocol; cooperative-sticky"
                                          " moves only the partitions that change owner")
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", description="how the consumer talks to the brokers: SSL and SASL_SSL verify the brokers'"
                                 " certificates (against KAFKA_SSL_CA_LOCATION or the system's CAs)")
    kafka_ssl_ca_location: FilePath | None = Field(
        None, description="PEM file of the CA certificates the brokers' certificates chain to (default: the"
                          " system's)")
    kafka_ssl_certificate_location: FilePath | None = Field(
        None, description="PEM file of the client certificate (mutual TLS), with KAFKA_SSL_KEY_LOCATION")
    kafka_ssl_key_location: FilePath | None = Field(
        None, description="PEM file of the client certificate's private key (mutual TLS)")
    kafka_ssl_key_password: SecretStr | None = Field(
        None, repr=False, json_schema_extra=SECRET,
        description="password of KAFKA_SSL_KEY_LOCATION, if the key is encrypted")
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None = Field(
        None, description="SASL mechanism (with SECURITY_PROTOCOL SASL_SSL or SASL_PLAINTEXT); PLAIN and SCRAM"
                          " take KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD")
    kafka_sasl_username: str | None = Field(
        None, repr=False, min_length=1, max_length=1024, json_schema_extra=SECRET,
        description="SASL user (PLAIN, SCRAM); a Confluent Cloud API key")
    kafka_sasl_password: SecretStr | None = Field(
        None, repr=False, json_schema_extra=SECRET,
        description="SASL password (PLAIN, SCRAM); a Confluent Cloud API secret")
    kafka_oauth_provider: Literal["aws-msk-iam", "librdkafka"] = Field(
        "aws-msk-iam", description="OAUTHBEARER tokens from: aws-msk-iam (signed with the AWS credentials of the"
                                   " process, for MSK IAM) or librdkafka (its own OIDC client, set in KAFKA_CONFIG)")
    kafka_aws_region: str | None = Field(
        None, pattern=r"^[a-z]{2}(-[a-z]+)+-\d$", description="AWS region of the MSK cluster (aws-msk-iam tokens)")
    kafka_config: SecretStr | None = Field(
        None, repr=False, json_schema_extra=SECRET,
        description='JSON object of further librdkafka consumer properties, e.g. {"max.poll.interval.ms": 300000,'
                    ' "client.rack": "use1-az1"}; never the ones a setting above owns. Kept secret as a whole (it may'
                    " hold an OAuth client secret)")

    @field_validator("source_topics")
    @classmethod
    def _topics_parse(cls, value: str) -> str:
        parse_topics(value)
        return value

    @field_validator("kafka_config")
    @classmethod
    def _config_parses(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            parse_pass_through(value.get_secret_value())
        return value

    def pass_through(self) -> dict[str, PassThroughValue]:
        """The librdkafka properties of KAFKA_CONFIG (secrets included: never log them)."""
        return {} if self.kafka_config is None else parse_pass_through(self.kafka_config.get_secret_value())

    @model_validator(mode="after")
    def _security_fits(self) -> Self:
        protocol, mechanism = self.kafka_security_protocol, self.kafka_sasl_mechanism
        if not self.kafka_bootstrap:
            raise ValueError("kafka_bootstrap is required: the brokers the worker consumes from")
        if protocol in SASL_PROTOCOLS and mechanism is None:
            raise ValueError(f"kafka_security_protocol {protocol} needs kafka_sasl_mechanism")
        if mechanism is not None and protocol not in SASL_PROTOCOLS:
            raise ValueError(f"kafka_sasl_mechanism {mechanism} needs kafka_security_protocol SASL_SSL (or"
                             " SASL_PLAINTEXT)")
        password_based = mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
        if password_based and not (self.kafka_sasl_username and self.kafka_sasl_password):
            raise ValueError(f"kafka_sasl_mechanism {mechanism} needs kafka_sasl_username and kafka_sasl_password")
        if not password_based and (self.kafka_sasl_username or self.kafka_sasl_password):
            raise ValueError("kafka_sasl_username and kafka_sasl_password are read only with kafka_sasl_mechanism"
                             " PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
        if mechanism == "OAUTHBEARER" and self.kafka_oauth_provider == "aws-msk-iam" and not self.kafka_aws_region:
            raise ValueError("kafka_sasl_mechanism OAUTHBEARER with kafka_oauth_provider aws-msk-iam needs"
                             " kafka_aws_region")
        tls_files = [name for name in ("kafka_ssl_ca_location", "kafka_ssl_certificate_location",
                                       "kafka_ssl_key_location", "kafka_ssl_key_password") if getattr(self, name)]
        if tls_files and protocol not in TLS_PROTOCOLS:
            raise ValueError(f"{', '.join(tls_files)} need kafka_security_protocol SSL or SASL_SSL: over"
                             f" {protocol} they would be ignored")
        if bool(self.kafka_ssl_certificate_location) != bool(self.kafka_ssl_key_location):
            raise ValueError("kafka_ssl_certificate_location and kafka_ssl_key_location go together (mutual TLS)")
        if self.kafka_ssl_key_password and not self.kafka_ssl_key_location:
            raise ValueError("kafka_ssl_key_password needs kafka_ssl_key_location")
        if self.kafka_group_protocol == "consumer" and "kafka_assignment_strategy" in self.model_fields_set:
            raise ValueError("kafka_assignment_strategy is for kafka_group_protocol classic; with consumer the"
                             " brokers assign (group.remote.assignor in kafka_config)")
        return self

    def topics(self) -> tuple[list[str], str | None]:
        """The topic names, or the ``^`` pattern (:func:`parse_topics`)."""
        return parse_topics(self.source_topics)

    @property
    def cooperative(self) -> bool:
        """Whether rebalances are incremental (only the partitions that move are revoked)."""
        return self.kafka_group_protocol == "consumer" or self.kafka_assignment_strategy == "cooperative-sticky"

    def consumer_config(self) -> dict[str, Any]:
        """The librdkafka configuration of the worker's consumer (secrets included: never log it).
        Offsets are never stored or committed by the client itself: the worker commits only the
        offsets of records made durable."""
        from consolidator.support.kafkalog import client_logging

        config: dict[str, Any] = {
            **client_logging(),
            **CONSUMER_DEFAULTS,
            "bootstrap.servers": self.kafka_bootstrap,
            "group.id": self.kafka_group_id,
            "group.protocol": self.kafka_group_protocol,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            "security.protocol": self.kafka_security_protocol,
        }
        if self.kafka_group_protocol == "classic":
            config["partition.assignment.strategy"] = self.kafka_assignment_strategy
        for name, key in (("kafka_ssl_ca_location", "ssl.ca.location"),
                          ("kafka_ssl_certificate_location", "ssl.certificate.location"),
                          ("kafka_ssl_key_location", "ssl.key.location")):
            if (path := getattr(self, name)) is not None:
                config[key] = str(path)
        if self.kafka_ssl_key_password is not None:
            config["ssl.key.password"] = self.kafka_ssl_key_password.get_secret_value()
        if self.kafka_sasl_mechanism is not None:
            config["sasl.mechanism"] = self.kafka_sasl_mechanism
        if self.kafka_sasl_username is not None and self.kafka_sasl_password is not None:
            config["sasl.username"] = self.kafka_sasl_username
            config["sasl.password"] = self.kafka_sasl_password.get_secret_value()
        if self.kafka_sasl_mechanism == "OAUTHBEARER" and self.kafka_oauth_provider == "aws-msk-iam":
            from consolidator.sinks.kafka import msk_iam_oauth_cb

            config["oauth_cb"] = msk_iam_oauth_cb(self.kafka_aws_region)
        return {**config, **self.pass_through()}
