"""Shared pieces of the ``consolidator spark`` commands: the setting options, derived from the
settings' declarations (overrides of the settings models, same names and units as the variables),
and the checks that run before Spark starts."""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from consolidator.cli.options import as_setting, bounded
from consolidator.cli.render import echo

_SETTING = "Default: $CONSOLIDATOR_{}, else the settings' default."
MasterOpt = Annotated[str | None, typer.Option(
    "--master", help="e.g. local[2]; leave unset under spark-submit / EMR.")]
SourceOpt = Annotated[str, typer.Option(
    "--source", help="Kafka reader: auto (Spark's kafka connector if present), spark or python.")]
KafkaOpts = Annotated[list[str] | None, typer.Option(
    "--kafka-option", help="key=value passed to the Kafka reader (e.g. kafka.security.protocol=SSL).")]


def option_flag(name: str, info) -> str:
    """The option of the setting ``name`` (its ``FieldInfo``): as declared, else ``--`` and its name."""
    from consolidator.settings import reach

    return reach(info)["option"] or "--" + name.replace("_", "-")


def command_settings(model, command: str) -> dict[str, object]:
    """The settings of ``model`` (name -> ``FieldInfo``) whose declaration makes them options of
    ``consolidator spark <command>``."""
    from consolidator.settings import reach

    return {name: info for name, info in model.model_fields.items() if command in reach(info)["spark"]}


def grid_settings(model) -> dict[str, object]:
    """The settings of ``model`` that ``spark replay`` takes as comma-separated candidates."""
    from consolidator.settings import reach

    return {name: info for name, info in command_settings(model, "replay").items() if reach(info)["grid"]}


def _number_type(info) -> type | None:
    """int or float when the setting is a number (None allowed), else None."""
    kinds = [k for k in typing.get_args(info.annotation) if k is not type(None)] \
        if isinstance(info.annotation, types.UnionType) or typing.get_origin(info.annotation) is typing.Union \
        else [info.annotation]
    return kinds[0] if len(kinds) == 1 and kinds[0] in (int, float) else None


def _option(name: str, info, *, grid: bool) -> object:
    """The typer annotation of the option of the setting ``name``: its type and bounds (numbers), its
    doc line and where its default comes from as help; ``grid``: comma-separated candidates."""

    doc = (info.description or "").rstrip(".")
    help_text = f"{doc[:1].upper()}{doc[1:]}. {_SETTING.format(name.upper())}"
    number = _number_type(info)
    if grid:
        return Annotated[str | None, typer.Option(option_flag(name, info), help="Comma-separated candidates. " + help_text)]
    if number is None:
        return Annotated[str | None, typer.Option(option_flag(name, info), help=help_text)]
    return Annotated[number | None, typer.Option(option_flag(name, info), parser=as_setting(name), help=help_text)]


@dataclass(frozen=True)
class SettingValues:
    """The values of a command's setting options (setting -> value; None: not given)."""

    values: dict[str, object]


def setting_options(model, command: str):
    """Decorator of the command ``consolidator spark <command>``: one option per setting of
    ``model`` whose declaration names the command (``reaches(spark=...)``), in declaration order
    after the command's own; their values reach the command as its ``settings`` argument
    (:class:`SettingValues`). On ``replay`` a grid setting takes comma-separated candidates."""
    fields = command_settings(model, command)
    grid = grid_settings(model) if command == "replay" else {}

    def decorate(func):
        signature = inspect.signature(func, eval_str=True)
        own = [p for p in signature.parameters.values() if p.name != "settings"]
        added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                   annotation=_option(name, info, grid=name in grid))
                 for name, info in fields.items()]

        @functools.wraps(func)
        def run(**kwargs):
            values = SettingValues({name: kwargs.pop(name) for name in fields})
            return func(**kwargs, settings=values)

        run.__signature__ = signature.replace(parameters=[*own, *added])
        return run

    return decorate


def _settings(model, params: dict):
    """``model`` with the command's options (``params``: setting -> value, None: not given) as
    overrides of the environment; a bad value is a usage error naming the option."""
    from consolidator.rules.errors import ConfigurationError
    from consolidator.settings import load_settings

    overrides, options = {}, {}
    for field, value in params.items():
        if field in model.model_fields:
            overrides[field] = value
            options[field] = option_flag(field, model.model_fields[field])
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
