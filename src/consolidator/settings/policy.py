"""The flush policy's settings (docs/semantics.md sections 3 and 7): when a group is due, how big
a batch may be, how often the flush ticks, the default rate limit and the events' time-to-live,
and the one rule between two of them (:func:`check_windows`)."""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from consolidator.rules.policy import MAX_RATE_BATCHES, MAX_RATE_PERIOD_MS, Policy, RateLimit
from consolidator.settings.base import (
    DAY_SECONDS,
    SPARK_COMMANDS,
    Root,
    Seconds,
    SecondsOrOff,
    reaches,
)

MAX_RATE_PERIOD_SECONDS = MAX_RATE_PERIOD_MS / 1000  # 7 days; also the bound of `consolidator limits set --per`
WINDOWS_RULE = "a group is flushed at the latest when its hard window ends, so a longer debounce would never apply"


def check_windows(debounce_seconds: float, hard_window_seconds: float) -> None:
    """The one cross-setting rule of the policy (docs/semantics.md section 3): a hard window
    shorter than the debounce would make the debounce unreachable, so it is refused."""
    if hard_window_seconds < debounce_seconds:
        raise ValueError(f"hard_window_seconds ({hard_window_seconds:g}) must be at least debounce_seconds"
                         f" ({debounce_seconds:g}): {WINDOWS_RULE}")


class _Policy(Root):
    debounce_seconds: Seconds = Field(
        300, le=31 * DAY_SECONDS, json_schema_extra=reaches(deployed=True, spark=SPARK_COMMANDS, grid=True),
        description="a group is due when idle this long (no new event)")
    hard_window_seconds: Seconds = Field(
        1800, le=31 * DAY_SECONDS, json_schema_extra=reaches(deployed=True, spark=SPARK_COMMANDS, grid=True),
        description="a group is due at the latest when its oldest pending row is this old, however busy the group;"
                    " at least DEBOUNCE_SECONDS (a shorter one is refused: the debounce would never apply)")
    max_batch_size: int = Field(
        500, gt=0, le=10_000, json_schema_extra=reaches(deployed=True, spark=SPARK_COMMANDS, grid=True),
        description="a group is due as soon as it has this many pending rows; also the most rows one batch takes")
    tick_interval_seconds: Seconds = Field(
        30, le=900, json_schema_extra=reaches(deployed=True, spark=("replay",)),
        description="time between ticks inside one flush invocation, and the replay's tick grid (a CDK"
                    " environment file: at most 60, the flush schedule's period)")

    rate_limit_batches: int = Field(
        0, ge=0, le=MAX_RATE_BATCHES, json_schema_extra=reaches(deployed=True, spark=SPARK_COMMANDS),
        description="Default limit: at most this many batches per group per period; 0 = no default limit"
        " (per-group overrides from `consolidator limits set` still apply)",
    )
    rate_limit_period_seconds: Seconds = Field(
        60, le=MAX_RATE_PERIOD_SECONDS, json_schema_extra=reaches(deployed=True, spark=SPARK_COMMANDS),
        description="The period of RATE_LIMIT_BATCHES (a sliding window), at most 7 days; also the bounds of"
        " `limits set --per`")
    event_ttl_seconds: SecondsOrOff = Field(
        21_600, le=365 * DAY_SECONDS, json_schema_extra=reaches(deployed=True, spark=SPARK_COMMANDS, grid=True),
        description="Rows whose newest event's record timestamp is older than this when they would be"
        " claimed go to the dead-letter destination as `expired`; 0 turns the TTL off",
    )

    def policy(self) -> Policy:
        return Policy(
            debounce_ms=round(self.debounce_seconds * 1000),
            hard_window_ms=round(self.hard_window_seconds * 1000),
            max_batch_size=self.max_batch_size,
            tick_interval_ms=round(self.tick_interval_seconds * 1000),
            rate_limit=self.rate_limit(),
            ttl_ms=round(self.event_ttl_seconds * 1000),
        )

    def rate_limit(self) -> RateLimit | None:
        if not self.rate_limit_batches:
            return None
        return RateLimit(self.rate_limit_batches, round(self.rate_limit_period_seconds * 1000))

    @model_validator(mode="after")
    def _hard_window_not_shorter_than_debounce(self) -> Self:
        check_windows(self.debounce_seconds, self.hard_window_seconds)
        return self
