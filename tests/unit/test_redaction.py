"""Secrets never printed: the repr of connection parameters, and every error message that
quotes a URL (database, sink, dead letter) masks its credentials."""

from __future__ import annotations

import pytest

from consolidator.sinks import sink_from_url
from consolidator.sinks.deadletter import dead_letter_from_url
from consolidator.store.connection import ConnectionParams
from consolidator.support.redact import masked

SECRET = "hunter2-s3cr3t"


def test_connection_params_never_show_the_password():
    params = ConnectionParams.from_url(f"mysql://app:{SECRET}@db.internal:3306/buffer")
    assert params.password == SECRET
    for text in (repr(params), str(params), f"{params}", repr([params])):
        assert SECRET not in text and "db.internal" in text
    secret_params = ConnectionParams.from_secret({"host": "h", "username": "u", "password": SECRET})
    assert SECRET not in repr(secret_params)


@pytest.mark.parametrize("parse, url", [
    (ConnectionParams.from_url, f"mysql://app:{SECRET}@/buffer"),
    (sink_from_url, f"kafka://app:{SECRET}@broker:9092"),
    (sink_from_url, f"ftp://app:{SECRET}@host/x"),
    (dead_letter_from_url, f"ftp://app:{SECRET}@host/x"),
    (sink_from_url, f"sqs://sqs.eu-west-1.amazonaws.com/x?token={SECRET}"),
])
def test_a_url_in_an_error_message_is_masked(parse, url):
    with pytest.raises(ValueError) as caught:
        parse(url)
    assert SECRET not in str(caught.value) and "***" in str(caught.value)


@pytest.mark.parametrize("text, expected", [
    (f"mysql://app:{SECRET}@db:3306/x?ssl=true", "mysql://***@db:3306/x?ssl=true"),
    (f"mysql://app:p@{SECRET}@db/x", "mysql://***@db/x"),  # an '@' in the password
    (f"redis://:{SECRET}@cache:6379/0?password={SECRET}", "redis://***@cache:6379/0?password=***"),
    ("kafka://b-1:9098/batches?auth=iam&region=eu-west-1", "kafka://b-1:9098/batches?auth=iam&region=eu-west-1"),
    (f'kafka.sasl.jaas.config=ScramLoginModule required username="u" password="{SECRET}";',
     'kafka.sasl.jaas.config=ScramLoginModule required username="u" password="***";'),
])
def test_masked_keeps_where_and_hides_who(text, expected):
    assert masked(text) == expected
