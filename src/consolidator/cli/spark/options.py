"""Shared pieces of the ``consolidator spark`` commands: the setting options (overrides of the
settings models, same names and units as the variables) and the checks that run before Spark
starts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from consolidator.cli.options import as_setting, bounded
from consolidator.cli.render import echo

_SETTING = "Default: $CONSOLIDATOR_{}, else the settings' default."
DebounceOpt = Annotated[float | None, typer.Option("--debounce-seconds", parser=as_setting("debounce_seconds"), help=_SETTING.format("DEBOUNCE_SECONDS"))]
HardOpt = Annotated[float | None, typer.Option("--hard-window-seconds", parser=as_setting("hard_window_seconds"),
                                               help=_SETTING.format("HARD_WINDOW_SECONDS"))]
SizeOpt = Annotated[int | None, typer.Option("--max-batch-size", parser=as_setting("max_batch_size"), help=_SETTING.format("MAX_BATCH_SIZE"))]
TickOpt = Annotated[float | None, typer.Option(
    "--tick-interval-seconds", parser=as_setting("tick_interval_seconds"), help="Replay tick grid (the flush function's tick). "
                                    + _SETTING.format("TICK_INTERVAL_SECONDS"))]
MasterOpt = Annotated[str | None, typer.Option(
    "--master", help="e.g. local[2]; leave unset under spark-submit / EMR.")]
SourceOpt = Annotated[str, typer.Option(
    "--source", help="Kafka reader: auto (Spark's kafka connector if present), spark or python.")]
GroupField = Annotated[str | None, typer.Option("--group-key-field", help=_SETTING.format("GROUP_KEY_FIELD"))]
ItemField = Annotated[str | None, typer.Option("--item-id-field", help=_SETTING.format("ITEM_ID_FIELD"))]
ItemsField = Annotated[str | None, typer.Option("--items-field", help=_SETTING.format("ITEMS_FIELD"))]
SkuField = Annotated[str | None, typer.Option("--sku-field", help=_SETTING.format("SKU_FIELD"))]
QuantityField = Annotated[str | None, typer.Option("--quantity-field", help=_SETTING.format("QUANTITY_FIELD"))]
AggregateOpt = Annotated[str | None, typer.Option(
    "--aggregate", help="The batch's outputs: JSON list inline or a file path. " + _SETTING.format("AGGREGATE"))]
PayloadOpt = Annotated[str | None, typer.Option(
    "--member-payload", help="none, full or a JSON list of paths. " + _SETTING.format("MEMBER_PAYLOAD"))]
MaxBytes = Annotated[int | None, typer.Option("--max-event-bytes", parser=as_setting("max_event_bytes"),
                                              help=_SETTING.format("MAX_EVENT_BYTES"))]
RateBatchesOpt = Annotated[int | None, typer.Option(
    "--rate-limit-batches", parser=as_setting("rate_limit_batches"), help="Batches per group per period; 0: none. " + _SETTING.format("RATE_LIMIT_BATCHES"))]
RatePeriodOpt = Annotated[float | None, typer.Option(
    "--rate-limit-period-seconds", parser=as_setting("rate_limit_period_seconds"), help=_SETTING.format("RATE_LIMIT_PERIOD_SECONDS"))]
TtlOpt = Annotated[float | None, typer.Option(
    "--event-ttl-seconds", parser=as_setting("event_ttl_seconds"), help="Event time-to-live; 0: off. " + _SETTING.format("EVENT_TTL_SECONDS"))]
KafkaOpts = Annotated[list[str] | None, typer.Option(
    "--kafka-option", help="key=value passed to the Kafka reader (e.g. kafka.security.protocol=SSL).")]


def _settings(model, params: dict, rename: dict[str, str] | None = None):
    """``model`` with the command's options (``params``: parameter -> value, None: not given) as
    overrides of the environment; a bad value is a usage error naming the option."""
    from consolidator.rules.errors import ConfigurationError
    from consolidator.settings import load_settings

    overrides, options = {}, {}
    for param, value in params.items():
        field = (rename or {}).get(param, param)
        if field in model.model_fields:
            overrides[field] = value
            options[field] = "--" + param.replace("_", "-")
    try:
        return load_settings(model, overrides=overrides, options=options)
    except ConfigurationError as exc:
        _usage_error(exc)


def _usage_error(error: Exception) -> NoReturn:
    """One line on stderr and exit 2, as the rest of the CLI does for a configuration error."""
    echo(f"configuration error: {error}", err=True)
    raise typer.Exit(2)


def _pairs(values: list[str] | None) -> tuple[tuple[str, str], ...]:
    pairs = []
    for value in values or []:
        key, sep, rest = value.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"expected key=value, got {value!r}", param_hint="--kafka-option")
        pairs.append((key, rest))
    return tuple(pairs)


def _source(bootstrap_servers: str | None, topic: str | None, input_path: str | None, input_format: str) -> None:
    """Exactly one source, checked before Spark starts: Kafka (both options) or --input."""
    if input_path is not None:
        if bootstrap_servers or topic:
            raise typer.BadParameter("read Kafka (--bootstrap-servers, --topic) or files (--input), not both",
                                     param_hint="--input")
        if input_format not in ("json", "parquet"):
            raise typer.BadParameter(f"json or parquet, got {input_format!r}", param_hint="--format")
        if "://" not in input_path and not Path(input_path).is_dir():
            raise typer.BadParameter(f"{input_path} is not a directory", param_hint="--input")
    elif not (bootstrap_servers and topic):
        raise typer.BadParameter("pass --bootstrap-servers and --topic (Kafka), or --input DIR (files)",
                                 param_hint="--bootstrap-servers")


def _batch_cap(sink_url: str, configured: int | None) -> tuple[int, Callable[[bytes], int]]:
    """The same byte cap as the flush function: the sink's per-message limit unless lower, and
    how the sink counts a body against it (``Policy.measure_body``)."""
    from consolidator.sinks import sink_from_url

    try:
        sink = sink_from_url(sink_url)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--sink-url") from None
    try:
        limit, measure = sink.max_message_bytes, sink.measure_body
    finally:
        sink.close()
    if configured is not None and configured > limit:
        raise typer.BadParameter(f"{configured} is over the sink's per-message limit ({limit} bytes)",
                                 param_hint="--max-batch-bytes")
    return configured or limit, measure


def _candidates(values: str | None, option: str, parse, kind: str) -> list:
    """Comma-separated candidates of one grid option; ``[None]`` when it is not given (the
    setting's variable or default then applies)."""
    if values is None:
        return [None]
    parsed = []
    for value in (v.strip() for v in values.split(",") if v.strip()):
        try:
            parsed.append(parse(value))
        except ValueError:
            raise typer.BadParameter(f"comma-separated {kind} expected, got {value!r}", param_hint=option) from None
    if not parsed:
        raise typer.BadParameter("at least one value", param_hint=option)
    return parsed


def _rate(value: str) -> tuple[int, float | None]:
    """``N/SECONDS``, or ``none`` (also ``0``) for no limit."""
    if value.lower() in ("none", "0"):
        return 0, None
    batches, sep, seconds = value.partition("/")
    if not sep:
        raise ValueError(value)
    return int(batches), float(seconds)


MAX_P95_SECONDS = 10 * 365 * 86_400
max_p95_seconds = bounded(0.001, MAX_P95_SECONDS, " seconds")  # the parser of `replay --max-p95-seconds`
