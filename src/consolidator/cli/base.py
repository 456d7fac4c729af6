"""Shared plumbing of the operator CLI: the root app, error mapping, JSON output, settings.

Settings come from ``CONSOLIDATOR_*`` environment variables (the same ones the Lambda
functions read). Exit codes: 0 done, 1 failed or refused (the message says why),
2 usage or configuration error. Commands a script would parse accept ``--json`` and then
print exactly one JSON document on stdout.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
import json
import re
import sys
from collections.abc import Callable
from typing import Annotated, Any, ClassVar

import typer
from typer._click import exceptions as click_exceptions
from typer.core import TyperCommand, TyperGroup

from consolidator.cli.options import MARKUP_MODE, as_setting, bounded, topic_name  # noqa: F401 (option parsers)
from consolidator.cli.render import console, echo, styled
from consolidator.rules.errors import ConfigurationError, ConsolidatorError
from consolidator.rules.printable import echoed
from consolidator.support import tracing

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

# Every command prints through these (or render.echo): data is printed as text, never as markup,
# and no control character reaches the terminal (consolidator.cli.render).
out = console(sys.stdout)
err = console(sys.stderr, stderr=True)

# What to do about the database errors an operator meets first (MySQL error codes).
DATABASE_HINTS = {
    1044: "the user may not use this database: grant it access, or fix the database in CONSOLIDATOR_DATABASE_URL",
    1045: "the database refused the user or password: fix CONSOLIDATOR_DATABASE_URL "
          "(or the secret of CONSOLIDATOR_DATABASE_SECRET_ARN)",
    1698: "create a user with a password for Consolidator (CREATE USER 'consolidator'@'%' IDENTIFIED BY '...';"
          " GRANT ALL ON <database>.* TO 'consolidator'@'%') and put it in CONSOLIDATOR_DATABASE_URL"
          " (mysql://consolidator:<password>@host:3306/<database>)",
    1049: "the database does not exist: run `consolidator db migrate --create` (or CREATE DATABASE <name>, then"
          " `consolidator db migrate`)",
    1146: "a table is missing: run `consolidator db migrate`",
    2002: "no database server at that address: is it running? check host and port in CONSOLIDATOR_DATABASE_URL",
    2003: "no database server at that address: is it running? check host and port in CONSOLIDATOR_DATABASE_URL",
    2005: "unknown database host: check the host in CONSOLIDATOR_DATABASE_URL",
}


def mysql_code(exc: BaseException) -> int | None:
    """The MySQL error code behind ``exc`` (its cause chain), if there is one."""
    seen = exc
    while seen is not None:
        args = getattr(seen, "args", ())
        if args and isinstance(args[0], int):
            return args[0]
        seen = seen.__cause__
    return None


def database_hint(exc: BaseException) -> str | None:
    """The hint for the MySQL error code behind ``exc`` (its cause chain), if there is one."""
    return DATABASE_HINTS.get(mysql_code(exc))


def say_error(prefix: str, message: object) -> None:
    """One line on stderr: a red prefix and the message, printed as text (consolidator.cli.render)."""
    err.print(styled(f"{prefix}:", "red"), str(message), soft_wrap=True)


class _LazySubApp(TyperGroup):
    """A sub-app imported only when invoked, so ``consolidator --help`` and the other commands
    work without its dependencies (``spark`` needs the ``spark`` extra)."""

    def __init__(self, name: str, target: str, help: str) -> None:
        super().__init__(name=name, help=help)
        self._target = target
        self._real: TyperGroup | None = None

    def _load(self) -> TyperGroup:
        if self._real is None:
            module_name, attr = self._target.split(":")
            try:
                module = importlib.import_module(module_name)
            except ImportError as exc:
                hint = "" if (exc.name or "").startswith("consolidator") else f"; install consolidator[{self.name}]"
                say_error(f"'{self.name}' is not available", f"{exc}{hint}")
                raise typer.Exit(EXIT_USAGE) from None
            self._real = typer.main.get_command(getattr(module, attr))
        return self._real

    def make_context(self, info_name, args, parent=None, **extra):
        return self._load().make_context(info_name, args, parent=parent, **extra)

    def list_commands(self, ctx):
        return self._load().list_commands(ctx)

    def get_command(self, ctx, name):
        return self._load().get_command(ctx, name)


class _Root(TyperGroup):
    LAZY: ClassVar[dict[str, tuple[str, str]]] = {"spark": ("consolidator.cli.spark.commands:spark_app", "Spark jobs (streaming, replay); needs the spark extra.")}

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        """Piped (no rich boxes), a usage error is one line on stderr naming the option, the value
        and what is allowed, then exit 2: a script's log keeps it whole, and ``grep`` finds it."""
        if not standalone_mode or self.rich_markup_mode is not None:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click_exceptions.NoArgsIsHelpError as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click_exceptions.ClickException as exc:
            where = f" (see '{exc.ctx.command_path} --help')" if getattr(exc, "ctx", None) is not None else ""
            say_error("usage error" if isinstance(exc, click_exceptions.UsageError) else "error",
                      f"{exc.format_message()}{where}")
            sys.exit(exc.exit_code)
        except typer.Abort:
            echo("Aborted!", err=True)
            sys.exit(EXIT_FAILED)
        sys.exit(code if isinstance(code, int) else EXIT_OK)

    def list_commands(self, ctx):
        return [*super().list_commands(ctx), *self.LAZY]

    def get_command(self, ctx, name):
        if name in self.LAZY:
            target, help_text = self.LAZY[name]
            return _LazySubApp(name, target, help_text)
        return super().get_command(ctx, name)



ROOT_HELP = (
    "Operate the Consolidator buffer: db (schema), status, flush, ingest (a local file), kafka (a local"
    " Kafka), dlq (dead letters), batch (completion tracking), limits (rate limits), offsets (replay"
    " marks), partitions, docs (generated pages: configuration, metrics, dashboards), demo, worker (the long-running consumer service), spark (Spark jobs). Settings"
    " come from CONSOLIDATOR_* variables: each command's --help names the ones it reads."
)

app = typer.Typer(
    cls=_Root,
    help=ROOT_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=MARKUP_MODE,
)

def variables_help(models: dict[str, str]) -> str:
    """The variables each settings model of a command reads, for its help: the required ones
    (``needs``) and the others (``also reads``), by mode (``""``: always; ``"--dry-run"``: with
    that flag). Built from the models, so the help never drifts from what the command loads."""
    from consolidator import settings

    paragraphs = ["Variables (defaults and bounds: docs/reference/configuration.md):"]
    for mode, model_name in models.items():
        model = getattr(settings, model_name)
        fields = model.model_fields
        prefix = settings.ENV_PREFIX
        also_required = getattr(model, "REQUIRED_SETTINGS", ())  # optional fields a rule of the model requires
        required = [prefix + name.upper() for name, f in fields.items() if f.is_required() or name in also_required]
        if "database_url" in fields:
            required.insert(0, f"{prefix}DATABASE_URL (or {prefix}DATABASE_SECRET_ARN)")
        others = [prefix + name.upper() for name, f in fields.items()
                  if not f.is_required() and name not in ("database_url", "database_secret_arn", *also_required)]
        text = (f"{mode}: " if mode else "") + "needs " + ", ".join(required)
        paragraphs.append(text + ("; also reads " + ", ".join(others) if others else "") + ".")
    return "\n\n".join(paragraphs)


class SettingsCommand(TyperCommand):
    """A command whose help ends with the ``CONSOLIDATOR_*`` variables it reads (its settings
    models, computed when the help is shown: the CLI starts without importing them)."""

    settings_models: ClassVar[dict[str, str]] = {}

    def format_help(self, ctx, formatter) -> None:
        self.epilog = variables_help(self.settings_models)
        return super().format_help(ctx, formatter)


def reads(models: str | dict[str, str]) -> type[SettingsCommand]:
    """The command class of a command that loads the settings model ``models``, or one model
    per mode: ``@app.command(cls=reads({"": "FlushSettings", "with --dry-run": "FlushDryRunSettings"}))``."""
    models = {"": models} if isinstance(models, str) else models
    return type("ReadsSettings", (SettingsCommand,), {"settings_models": models})


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            echo(f"consolidator {version('consolidator')}")
        except PackageNotFoundError:
            echo("consolidator (not installed as a package: version unknown)")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(
    show_version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    """Operate the Consolidator buffer (every group has --help)."""


JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]


MAX_LIST = 100_000  # the most rows one listing command reads or shows

BATCH_ID = re.compile(r"[0-9a-f]{32}")  # batch ids are 128 bits, in lowercase hex (consolidator.rules.batch)


def fail(message: str, as_json: bool, **document: Any) -> typer.Exit:
    """Refuse with exit 1: one line on stderr, and with ``--json`` also one JSON document on
    stdout (``{"error": message, ...document}``) so a script reading stdout learns why."""
    say_error("error", message)
    if as_json:
        emit_json({"error": message, **document})
    return typer.Exit(EXIT_FAILED)


def check_batch_ids(batch_ids: list[str], as_json: bool) -> None:
    """Exit 1 (with a JSON error document under ``--json``) when any of ``batch_ids`` is not a
    batch id: 32 lowercase hex characters."""
    malformed = [b for b in batch_ids if not BATCH_ID.fullmatch(b)]
    if malformed:
        raise fail(f"not a batch id: {echoed(malformed[0])} (a batch id is 32 lowercase hex characters)", as_json,
                   malformed=malformed)


def guarded(command: Callable) -> Callable:
    """Map the project's errors to one clear line and the documented exit codes. Tracing is
    configured from the ``OTEL_*`` variables first (:mod:`consolidator.support.tracing`) and
    the command's spans (service ``consolidator-<command>``) are exported before it returns."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            tracing.configure(f"consolidator-{command.__name__.replace('_', '-')}")  # e.g. consolidator-worker
            return command(*args, **kwargs)
        except ConfigurationError as exc:
            say_error("configuration error", exc)
            raise typer.Exit(EXIT_USAGE) from None
        except ConsolidatorError as exc:
            hint = database_hint(exc)
            say_error("error", f"{exc} -> {hint}" if hint else exc)
            raise typer.Exit(EXIT_FAILED) from None
        finally:
            tracing.flush()

    return wrapper


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def emit_json(document: Any) -> None:
    """One JSON document on one line of stdout (ASCII: every other character as a JSON escape)."""
    echo(json.dumps(_jsonable(document), sort_keys=True))


def load_settings(model_name: str):
    from consolidator import settings

    return settings.load_settings(getattr(settings, model_name))


def store_for(s, *, migrating: bool = False):
    """The store of settings ``s``; it refuses a schema older than the current one unless
    ``migrating`` (see :func:`consolidator.store.open_store`)."""
    from consolidator.store import open_store

    return open_store(s.database_url, s.database_secret_arn, migrating=migrating)


def wall_clock_ms() -> int:
    from consolidator.rules.clock import SystemClock

    return SystemClock().now_ms()


def age_text(now_ms: int, then_ms: int | None) -> str:
    if then_ms is None:
        return "-"
    seconds = max(0, (now_ms - then_ms) / 1000)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"
