"""One setting by name, for code that sets the same quantity elsewhere (the CDK environment files,
a command's option): its declared type and bounds, and a value checked as the setting checks it."""

from __future__ import annotations

from typing import Annotated

from pydantic import TypeAdapter, ValidationError

from consolidator.settings.base import ENV_PREFIX, all_models, field_range, reach


def setting_field(name: str) -> tuple[type, object]:
    """(type, FieldInfo) of the setting ``name`` as a model declares it: for models that carry
    the same setting elsewhere (the CDK environment files), so its type, default and bounds are
    declared once."""
    for model in all_models():
        if name in model.model_fields:
            info = model.model_fields[name]
            return info.annotation, info
    raise KeyError(f"no settings model declares {name!r}")


def allowed_range(name: str) -> str:
    """The bounds of the number setting ``name``, e.g. ``0.001 <= x <= 2678400``."""
    return field_range(setting_field(name)[1])


def check_setting(name: str, value: object) -> object:
    """``value`` as the setting ``name`` accepts it (its type, finiteness and bounds), or a
    ValueError naming the value and the allowed range: for options that set the same quantity
    elsewhere (``consolidator limits set --per``)."""
    annotation, info = setting_field(name)
    try:
        return TypeAdapter(Annotated[annotation, info]).validate_python(value)
    except ValidationError as exc:
        shown = f"{value:g}" if isinstance(value, float) else repr(value)
        wrong = "is not a number" if exc.errors()[0]["type"].endswith("_parsing") else "is out of range"
        raise ValueError(f"{shown} {wrong}: allowed {allowed_range(name)}"
                         f" (as {ENV_PREFIX}{name.upper()})") from None


def deployed_settings() -> tuple[str, ...]:
    """The settings a CDK environment file carries (declared ``reaches(deployed=True)``), in
    declaration order: the stack passes each to every function whose model declares it."""
    return tuple(dict.fromkeys(name for model in all_models() for name, info in model.model_fields.items()
                               if reach(info)["deployed"]))
