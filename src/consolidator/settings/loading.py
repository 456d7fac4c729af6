"""Building a settings model from the environment and a command's options, with one error.

:func:`load_settings` is the only way a runtime (Lambda handler, CLI, Spark job, CDK synth) gets
its settings: it refuses ``CONSOLIDATOR_*`` variables no model knows (naming the closest known
one), and turns every validation problem into one :class:`ConfigurationError` line naming the
variable, or the option when the value came from one, with credentials masked.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from typing import TypeVar

from pydantic import ValidationError
from pydantic_settings import SettingsError

from consolidator.rules.errors import ConfigurationError
from consolidator.settings.base import (
    ENV_PREFIX,
    ENVIRON,
    Root,
    field_range,
    is_secret,
    known_variables,
)
from consolidator.settings.urls import mask

S = TypeVar("S", bound=Root)
NO_DATABASE = f"set {ENV_PREFIX}DATABASE_URL or {ENV_PREFIX}DATABASE_SECRET_ARN"
# A field's json_schema_extra key: its errors name each bad part of the value themselves (an
# aggregation spec's entries), so the value is not echoed after them.
NAMES_ITS_FAULTS = "names_its_faults"


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """One problem per ``CONSOLIDATOR_*`` name in ``environ`` that no settings model knows,
    with the closest known name when there is one."""
    known = known_variables()
    problems = []
    for name in sorted(n for n in environ if n.upper().startswith(ENV_PREFIX) and n.upper() not in known):
        close = difflib.get_close_matches(name.upper(), sorted(known), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        problems.append(f"{name} is not a known setting{hint}")
    return problems


def _label(field: str, options: Mapping[str, str], overrides: Mapping[str, object]) -> str:
    return options[field] if field in overrides and field in options else ENV_PREFIX + field.upper()


def problems_of(error: ValidationError, model: type[Root], environ: Mapping[str, str],
                overrides: Mapping[str, object], options: Mapping[str, str]) -> list[str]:
    """One line per problem, each naming the variable or option it is about."""
    problems = []
    for item in error.errors():
        field = "_".join(str(p) for p in item["loc"]) if item["loc"] else ""
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "missing":
            either = f"{options[field]} or " if field in options else ""
            problems.append(f"{either}{ENV_PREFIX}{field.upper()} is required but not set")
        elif field:
            info = model.model_fields.get(field)
            bounds = field_range(info) if info is not None else "x"
            allowed = f", allowed {bounds}" if bounds != "x" else ""  # a number: name its range
            extra = info.json_schema_extra if info is not None and isinstance(info.json_schema_extra, dict) else {}
            if info is not None and is_secret(info):
                shown = " (value hidden: a secret)"
            else:
                shown = "" if extra.get(NAMES_ITS_FAULTS) else f" (got {mask(item.get('input'))})"
            problems.append(f"{_label(field, options, overrides)}: {message}{allowed}{shown}")
        else:  # a rule over several settings names them by field: name them as the user gave them
            problems.append(re.sub(r"\b[a-z][a-z0-9_]*\b",
                                   lambda m: _label(m[0], options, overrides) if m[0] in model.model_fields else m[0],
                                   message))
    database = {f"{ENV_PREFIX}DATABASE_URL", f"{ENV_PREFIX}DATABASE_SECRET_ARN"}
    if ("database_url" in model.model_fields and NO_DATABASE not in problems
            and not any(value for name, value in environ.items() if name.upper() in database)
            and not overrides.get("database_url") and not overrides.get("database_secret_arn")):
        problems.append(NO_DATABASE)
    return problems


def load_settings(model: type[S], *, environ: Mapping[str, str] | None = None,
                  overrides: Mapping[str, object] | None = None, options: Mapping[str, str] | None = None) -> S:
    """``model`` read from ``environ`` (default ``os.environ``), ``overrides`` (field name ->
    value, e.g. a command's options; None values are left out) winning over it; or one
    :class:`ConfigurationError` naming every bad or unknown variable, each option by its
    ``options`` label (field name -> e.g. ``--debounce-seconds``), credentials masked."""
    environ = os.environ if environ is None else environ
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    problems = unknown_variables(environ)
    token = ENVIRON.set(environ)
    try:
        loaded = model(**given)
    except ValidationError as exc:
        problems += problems_of(exc, model, environ, given, options or {})
    except SettingsError as exc:  # a JSON-valued variable (a dict) that is not JSON: the value is not echoed
        field = re.search(r'field "(\w+)"', str(exc))
        name = ENV_PREFIX + field[1].upper() if field else "a JSON-valued variable"
        problems.append(f"{name}: not valid JSON ({exc.__cause__ or exc})")
    finally:
        ENVIRON.reset(token)
    if problems:
        raise ConfigurationError("invalid configuration: " + "; ".join(problems))
    return loaded
