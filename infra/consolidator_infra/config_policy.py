"""The policy section of an environment file: the product settings the functions receive as
``CONSOLIDATOR_*`` variables, declared once by ``consolidator.settings`` (types, defaults, bounds)
and checked by its rules at synth time."""

from __future__ import annotations

from typing import Self

from pydantic import create_model, model_validator

from consolidator.rules.shape import parse_outputs, parse_path, parse_payload
from consolidator.settings import ENV_PREFIX, check_windows, deployed_settings, setting_field
from consolidator_infra.config_model import ConfigModel

FLUSH_SCHEDULE_SECONDS = 60  # consolidator_infra/schedules.py: the flush function runs once a minute

# The product settings passed to the functions as CONSOLIDATOR_* variables: those the runtime
# declares as deployed (consolidator.settings), with its types, defaults, units and bounds.
POLICY_SETTINGS = deployed_settings()


class _PolicyRules(ConfigModel):
    @model_validator(mode="after")
    def _rules(self) -> Self:
        check_windows(self.debounce_seconds, self.hard_window_seconds)  # the runtime's own rule
        if self.aggregate is not None:  # the runtime's parser; a function has no spec file to read
            if not self.aggregate.lstrip().startswith("["):
                raise ValueError("aggregate must be the spec itself (a JSON list) in a deployment, not a file path")
            parse_outputs(self.aggregate)
        parse_payload(self.member_payload)
        if self.event_time_field is not None:
            try:
                parse_path(self.event_time_field)  # the runtime's rule: a path like "ts" or "meta.at"
            except ValueError as exc:
                raise ValueError(f"event_time_field: {exc}") from None
        if self.tick_interval_seconds > FLUSH_SCHEDULE_SECONDS:
            raise ValueError(f"tick_interval_seconds ({self.tick_interval_seconds:g}) must be at most"
                             f" {FLUSH_SCHEDULE_SECONDS} in a deployment: the flush function is scheduled once a"
                             " minute, so a longer tick would not be honoured")
        return self


PolicyConfig = create_model(
    "PolicyConfig", __base__=_PolicyRules, __module__=__name__,
    __doc__="The product settings of the functions, declared by consolidator.settings and checked by it.",
    **{name: setting_field(name) for name in POLICY_SETTINGS},
)


def deployed_environment(policy: PolicyConfig, model: type) -> dict[str, str]:
    """The ``CONSOLIDATOR_*`` variables of a function whose handler loads ``model``: every
    deployed setting the model declares, as the environment file gives it (unset ones left out)."""
    return {f"{ENV_PREFIX}{name.upper()}": str(value) for name in POLICY_SETTINGS
            if name in model.model_fields and (value := getattr(policy, name)) is not None}
