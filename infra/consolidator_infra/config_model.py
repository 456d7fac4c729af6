"""The base of every section of an environment file (``consolidator_infra.config``): frozen, and
a field it does not declare is an error; and the error that names every bad field."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ConfigError(ValueError):
    """An environment file is missing or invalid; the message names every bad field."""


class ConfigModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
