"""URL settings: parsed by pydantic's network types, then checked against what the code that
uses them needs (the store's and redis-py's own parsers, the sinks' URL forms); fields stay plain
strings. :func:`mask` hides credentials in error messages."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated
from urllib.parse import parse_qsl, urlsplit

from pydantic import (
    AfterValidator,
    AnyUrl,
    MySQLDsn,
    RedisDsn,
    TypeAdapter,
    UrlConstraints,
    ValidationError,
)
from pydantic_core import MultiHostUrl

from consolidator.rules.printable import echoed
from consolidator.support.redact import masked

SINK_SCHEMES = ("kafka", "sqs", "events", "file")
DEAD_LETTER_SCHEMES = ("sqs", "file")

_URLS = {
    "mysql": TypeAdapter(MySQLDsn),
    "redis": TypeAdapter(RedisDsn),
    "kafka": TypeAdapter(Annotated[MultiHostUrl, UrlConstraints(allowed_schemes=["kafka"], host_required=True)]),
    "any": TypeAdapter(AnyUrl),
}
_SQS_PATH = re.compile(r"/\d{12}/[A-Za-z0-9_-]{1,80}(\.fifo)?")
_EVENT_BUS = re.compile(r"[A-Za-z0-9/._-]{1,256}")
_SECRET_ARN = re.compile(r"arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d+:secret:[A-Za-z0-9/_+=.@-]+")


def _parse(kind: str, url: str):
    """``url`` parsed by pydantic's network type; its error message (never the input) otherwise."""
    try:
        return _URLS[kind].validate_python(url)
    except ValidationError as exc:
        raise ValueError(exc.errors()[0]["msg"]) from None


def _scheme(url: str, allowed: tuple[str, ...]) -> str:
    scheme = url.partition("://")[0] if "://" in url else ""
    if scheme not in allowed:
        raise ValueError(f"scheme must be one of {', '.join(s + '://' for s in allowed)}")
    return scheme


def _file_url(url: str) -> str:
    parts = urlsplit(url)
    if not parts.path or not ((parts.netloc or "") + parts.path).strip("/"):
        raise ValueError("file:// URL needs a path, e.g. file:///var/lib/consolidator/out.jsonl")
    return url


def _sqs_url(url: str) -> str:
    parsed = _parse("any", url)
    if not (parsed.host or "").startswith("sqs.") or not _SQS_PATH.fullmatch(parsed.path or ""):
        raise ValueError("must be sqs://sqs.<region>.amazonaws.com/<12-digit account>/<queue name>")
    return url


def check_database_url(url: str) -> str:
    """``mysql://user:password@host:port/database?ssl=true&ssl_ca=/path/ca.pem``: the database
    is named (a URL without one is refused, never read as a default database)."""
    check_database_server_url(url)
    if not urlsplit(url).path.strip("/"):
        raise ValueError("the URL names no database: add it as the path, e.g. mysql://user@host:3306/consolidator")
    return url


def check_database_server_url(url: str) -> str:
    """A database server's ``mysql://`` URL (``consolidator demo --database-url``): as
    :func:`check_database_url`, the database name optional."""
    _scheme(url, ("mysql",))
    _parse("mysql", url)
    from consolidator.store.connection import ConnectionParams

    try:
        params = ConnectionParams.from_url(url)  # the parser the store uses: same acceptance
    except ValueError as exc:
        raise ValueError(f"not a mysql:// URL the store can read: {exc}") from None
    if not params.database.replace("_", "").replace("-", "").replace("$", "").isalnum():
        raise ValueError("database name must be letters, digits, '_', '-' or '$'")
    if params.ssl_ca is not None and not Path(params.ssl_ca).is_file():
        raise ValueError(f"ssl_ca {echoed(params.ssl_ca)} is not a readable file")
    return url


def check_redis_url(url: str) -> str:
    """``redis://[:token@]host:6379/0`` or ``rediss://`` (TLS), as redis-py reads it."""
    _scheme(url, ("redis", "rediss"))
    _parse("redis", url)
    db = urlsplit(url).path.strip("/")
    if db and not (db.isdigit() and int(db) < 2**31):
        raise ValueError(f"the path must be a database number, got {echoed(db, 40)}")
    from redis.connection import ConnectionPool, parse_url

    try:
        parse_url(url)  # the parser redis-py uses
    except (ValueError, TypeError) as exc:
        raise ValueError(f"redis-py cannot read it: {str(exc)[:80]}") from None
    try:  # an option redis-py passes on as it is fails only here (building a connection connects nothing)
        ConnectionPool.from_url(url).make_connection()
    except TypeError as exc:
        unknown = re.search(r"argument '(\w+)'", str(exc))
        raise ValueError(f"unknown {urlsplit(url).scheme}:// URL option {unknown[1] if unknown else '?'!r}") from None
    return url


# The query options each sink URL takes (consolidator.sinks.sink_from_url reads them): any other
# is refused, never ignored.
SINK_OPTIONS = {"kafka": ("auth", "region", "max_message_bytes"), "sqs": (), "events": ("source", "detail_type"),
                "file": ()}
MAX_SINK_MESSAGE_BYTES = 100_000_000
_REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-\d")


def _options(url: str, scheme: str, allowed: tuple[str, ...]) -> dict[str, str]:
    """The URL's query options; an unknown or repeated one is refused, naming it and the known ones."""
    pairs = parse_qsl(urlsplit(url).query, keep_blank_values=True)
    for name, _ in pairs:
        if name not in allowed:
            known = f"it takes {', '.join(allowed)}" if allowed else "it takes none"
            raise ValueError(f"unknown {scheme}:// URL option {echoed(name, 40)} ({known})")
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        raise ValueError(f"{scheme}:// URL option given twice: {sorted({n for n in names if names.count(n) > 1})}")
    return dict(pairs)


def _kafka_options(url: str) -> None:
    options = _options(url, "kafka", SINK_OPTIONS["kafka"])
    if options.get("auth") not in (None, "iam"):
        raise ValueError(f"kafka:// auth must be 'iam' when given, got {echoed(options['auth'], 40)}")
    if "region" in options:
        if options.get("auth") != "iam":
            raise ValueError("kafka:// region is used only with auth=iam (the IAM signing region)")
        if not _REGION.fullmatch(options["region"]):
            raise ValueError(f"kafka:// region must be an AWS region such as eu-west-1, got {echoed(options['region'], 40)}")
    limit = options.get("max_message_bytes")
    if limit is not None and not (limit.isdigit() and 1 <= int(limit) <= MAX_SINK_MESSAGE_BYTES):
        raise ValueError(f"kafka:// max_message_bytes={echoed(limit, 40)} is out of range: allowed a whole number"
                         f" of bytes from 1 to {MAX_SINK_MESSAGE_BYTES:,}")


def _events_options(url: str) -> None:
    options = _options(url, "events", SINK_OPTIONS["events"])
    for name, most in (("source", 256), ("detail_type", 128)):  # EventBridge's PutEvents limits
        if name in options and not 1 <= len(options[name]) <= most:
            raise ValueError(f"events:// {name} of {len(options[name])} characters is out of range:"
                             f" allowed 1 to {most}")


def check_sink_url(url: str) -> str:
    """kafka://servers/topic[?auth=iam&region=..&max_message_bytes=N], sqs://,
    events://bus[?source=..&detail_type=..], file://path; any other query option is refused."""
    scheme = _scheme(url, SINK_SCHEMES)
    if scheme == "kafka":
        path = _parse("kafka", url).path or ""
        if not re.fullmatch(r"/[A-Za-z0-9._-]{1,249}", path):
            raise ValueError("kafka:// URL needs servers and one topic: kafka://host:9092,host2:9092/topic")
        _kafka_options(url)
    elif scheme == "sqs":
        _sqs_url(url)
        _options(url, scheme, SINK_OPTIONS["sqs"])
    elif scheme == "events":
        bus = urlsplit(url).netloc
        if not _EVENT_BUS.fullmatch(bus):
            raise ValueError("events:// URL needs an event bus name (letters, digits, / . _ -)")
        _events_options(url)
    else:
        _file_url(url)
        _options(url, scheme, SINK_OPTIONS["file"])
    return url


def check_dead_letter_url(url: str) -> str:
    """sqs://sqs.<region>.amazonaws.com/<account>/<queue> or file://path; no query options."""
    scheme = _scheme(url, DEAD_LETTER_SCHEMES)
    _sqs_url(url) if scheme == "sqs" else _file_url(url)
    _options(url, scheme, ())
    return url


def _check_arn(arn: str) -> str:
    if not _SECRET_ARN.fullmatch(arn):
        raise ValueError("must be a Secrets Manager secret ARN: arn:aws:secretsmanager:<region>:<account>:secret:<name>")
    return arn


DatabaseUrl = Annotated[str, AfterValidator(check_database_url)]
RedisUrl = Annotated[str, AfterValidator(check_redis_url)]
SinkUrl = Annotated[str, AfterValidator(check_sink_url)]
DeadLetterUrl = Annotated[str, AfterValidator(check_dead_letter_url)]
SecretArn = Annotated[str, AfterValidator(_check_arn)]


def mask(value: object) -> str:
    """``value`` for an error message: URL credentials and secret query parameters masked
    (:func:`consolidator.support.redact.masked`), quoted and bounded (:func:`consolidator.rules.printable.echoed`)."""
    return echoed(masked(value if isinstance(value, str) else repr(value)), 120)
