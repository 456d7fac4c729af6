"""What every settings model shares: the ``CONSOLIDATOR_`` prefix, the environment it is read
from (``os.environ``, or a mapping given to :func:`consolidator.settings.load_settings`), and
the number types that keep every duration finite and bounded, and the Kafka topic name type."""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from typing import Annotated

from pydantic import AfterValidator, Field
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict
from pydantic_settings.sources.utils import parse_env_vars

from consolidator.sources.msk import TOPIC, TOPIC_RULE

ENV_PREFIX = "CONSOLIDATOR_"
DAY_SECONDS = 86_400
MIN_SECONDS = 0.001  # one millisecond: every duration is converted to whole milliseconds

# Durations: finite, at least a millisecond (so they never round to 0 ms), and each field adds its
# upper bound, so they convert to milliseconds without surprises.
Seconds = Annotated[float, Field(ge=MIN_SECONDS, allow_inf_nan=False)]
# Durations where 0 means "off".
SecondsOrOff = Annotated[float, Field(ge=0, allow_inf_nan=False)]

def _check_topic(value: str) -> str:
    if not TOPIC.fullmatch(value):
        raise ValueError(f"not a Kafka topic name: {TOPIC_RULE}")
    return value


# A Kafka topic name, by Kafka's rules (consolidator.sources.msk.TOPIC).
KafkaTopic = Annotated[str, AfterValidator(_check_topic)]


# The marker of a setting whose value is a secret as a whole (a password, a map that may hold one):
# an error about it never quotes the value (consolidator.settings.loading), as repr=False keeps it
# out of the model's repr. URL settings are not marked: their errors quote them with credentials
# masked.
SECRET = {"secret": True}


# Where a setting reaches besides its variable, declared with it (keys of its Field's
# json_schema_extra, set by :func:`reaches`, read by :func:`reach`):
# - ``deployed``: the CDK environment files' ``policy`` section carries it, and the stack passes it
#   to every function whose handler's model declares it (consolidator_infra.config_policy);
# - ``spark``: the ``consolidator spark`` commands that take it as an option, ``--`` + its name
#   with dashes unless ``option`` names it otherwise (consolidator.cli.spark.options);
# - ``grid``: ``spark replay`` takes comma-separated candidates of it (one policy each).
SPARK_COMMANDS = ("stream", "replay")  # the commands that run a policy
_SPARK = (*SPARK_COMMANDS, "emr-submit")


def reaches(*, deployed: bool = False, spark: tuple[str, ...] = (), grid: bool = False,
            option: str | None = None, **extra: object) -> dict[str, object]:
    """The ``json_schema_extra`` of a setting that reaches further than its variable (see above)."""
    if unknown := set(spark) - set(_SPARK):
        raise ValueError(f"no spark command {sorted(unknown)}")
    return {**extra, "deployed": deployed, "spark": tuple(spark), "grid": grid, "option": option}


def reach(info) -> dict[str, object]:
    """Where the setting (its ``FieldInfo``) reaches: the keys of :func:`reaches`, defaults filled in."""
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    return {"deployed": bool(extra.get("deployed")), "spark": tuple(extra.get("spark") or ()),
            "grid": bool(extra.get("grid")), "option": extra.get("option")}


def is_secret(info) -> bool:
    """Whether the field (its ``FieldInfo``) holds a secret as a whole."""
    extra = info.json_schema_extra
    return isinstance(extra, dict) and extra.get("secret") is True


# CONSOLIDATOR_* variables read by code other than the settings models. Each is named here so
# that start-up does not take it for a misspelt setting (consolidator.settings.unknown_variables).
OTHER_VARIABLES: dict[str, str] = {
    f"{ENV_PREFIX}ENVIRONMENTS": "infra/app.py: which environments `cdk synth` builds (dev,prod)",
    f"{ENV_PREFIX}EMR_CHECK": "tests/infra/test_emr_archive.py: 1 runs the slow local EMR archive check",
}

# The environment the models read; None: os.environ.
ENVIRON: ContextVar[Mapping[str, str] | None] = ContextVar("consolidator_settings_environ", default=None)


class _Environment(EnvSettingsSource):
    def _load_env_vars(self) -> Mapping[str, str | None]:
        environ = ENVIRON.get()
        if environ is None:
            return super()._load_env_vars()
        return parse_env_vars(environ, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)


class Root(BaseSettings):
    """The base of every settings model: options given as keyword arguments (a CLI's overrides)
    win over the environment; no dotenv or secrets-directory sources."""

    # an empty variable counts as unset: "X is required" rather than "X: not a URL (got '')"
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="ignore", env_ignore_empty=True)

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings,
                                   file_secret_settings):
        return init_settings, _Environment(settings_cls)


def all_models() -> list[type[Root]]:
    """Every settings model (every subclass of :class:`Root`, mixins included)."""
    found: list[type[Root]] = []
    pending = [Root]
    while pending:
        for sub in pending.pop().__subclasses__():
            if sub not in found:
                found.append(sub)
                pending.append(sub)
    return found


def known_variables() -> set[str]:
    """The names of every ``CONSOLIDATOR_*`` variable some model or :data:`OTHER_VARIABLES` knows."""
    names = {ENV_PREFIX + name.upper() for model in all_models() for name in model.model_fields}
    return names | set(OTHER_VARIABLES)


def field_range(info) -> str:
    """The bounds of a number field (its ``FieldInfo``), e.g. ``0.001 <= x <= 2678400``; ``x``
    when it has none."""
    low = high = ""
    for bound in info.metadata:
        for attribute, text in (("ge", "{} <= "), ("gt", "{} < "), ("le", " <= {}"), ("lt", " < {}")):
            if (number := getattr(bound, attribute, None)) is not None:
                if attribute in ("ge", "gt"):
                    low = text.format(number)
                else:
                    high = text.format(number)
    return f"{low}x{high}"
