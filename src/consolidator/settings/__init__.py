"""Typed settings: the one declaration of every setting's name, type, default, unit, bounds, doc
line and cross-setting rules (environment variables with the prefix ``CONSOLIDATOR_``), and of
where else it reaches (:func:`~consolidator.settings.base.reaches`).

Every runtime goes through these models: the Lambda handlers and the CLI read them from the
environment, the Spark jobs' options are derived from them (same names, same units), the CDK
environment files carry the deployed ones and are validated by them at synth time, and the
configuration reference (docs/reference/configuration.md) is written from them
(:mod:`consolidator.settings.reference`). Built when a handler or command starts, never at import
time, by :func:`load_settings`: a missing, malformed or unknown variable (non-finite or
out-of-range numbers, URLs that do not parse or do not fit their destination, a misspelt name)
raises one :class:`ConfigurationError` naming every offending variable or option, with the
credentials of URLs masked.

One module per concern: ``connections`` (database, dead-letter destination, sink), ``fields``
(the event's fields and shape), ``policy`` (the flush policy), ``value_format``, ``kafka``,
``worker``; ``models`` composes them into each runtime's model; ``urls`` checks URLs; ``base``,
``loading`` and ``lookup`` are the machinery.
"""

from __future__ import annotations

from consolidator.rules.errors import ConfigurationError
from consolidator.settings.base import (
    DAY_SECONDS,
    ENV_PREFIX,
    OTHER_VARIABLES,
    all_models,
    known_variables,
    reach,
)
from consolidator.settings.connections import SINK_TIMEOUT_MAX_SECONDS, sink_timeout_seconds
from consolidator.settings.loading import load_settings, unknown_variables
from consolidator.settings.lookup import (
    allowed_range,
    check_setting,
    deployed_settings,
    setting_field,
)
from consolidator.settings.models import (
    AckSettings,
    BatchViewSettings,
    CleanupSettings,
    CompletionSettings,
    EmrSettings,
    FlushDryRunSettings,
    FlushSettings,
    IngestSettings,
    LimitSettings,
    PolicySettings,
    ReplaySettings,
    StreamSettings,
    WorkerFlushSettings,
    WorkerIngestSettings,
    WorkerSettings,
)
from consolidator.settings.models import (
    MigrateSettings as MigrateSettings,  # importable, not listed in __all__
)
from consolidator.settings.policy import MAX_RATE_PERIOD_SECONDS, WINDOWS_RULE, check_windows
from consolidator.settings.urls import (
    DEAD_LETTER_SCHEMES,
    SINK_SCHEMES,
    check_database_server_url,
    check_database_url,
    check_dead_letter_url,
    check_redis_url,
    check_sink_url,
    mask,
)
from consolidator.settings.value_format import check_glue_format

__all__ = [
    "DAY_SECONDS",
    "DEAD_LETTER_SCHEMES",
    "ENV_PREFIX",
    "MAX_RATE_PERIOD_SECONDS",
    "OTHER_VARIABLES",
    "SINK_SCHEMES",
    "SINK_TIMEOUT_MAX_SECONDS",
    "WINDOWS_RULE",
    "AckSettings",
    "BatchViewSettings",
    "CleanupSettings",
    "CompletionSettings",
    "ConfigurationError",
    "EmrSettings",
    "FlushDryRunSettings",
    "FlushSettings",
    "IngestSettings",
    "LimitSettings",
    "PolicySettings",
    "ReplaySettings",
    "StreamSettings",
    "WorkerFlushSettings",
    "WorkerIngestSettings",
    "WorkerSettings",
    "all_models",
    "allowed_range",
    "check_database_server_url",
    "check_database_url",
    "check_dead_letter_url",
    "check_glue_format",
    "check_redis_url",
    "check_setting",
    "check_sink_url",
    "check_windows",
    "deployed_settings",
    "known_variables",
    "load_settings",
    "mask",
    "reach",
    "setting_field",
    "sink_timeout_seconds",
    "unknown_variables",
]
