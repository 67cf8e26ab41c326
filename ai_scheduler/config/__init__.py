"""The config file: schema, validation with clear errors, and reload on change."""

from ai_scheduler.config.loader import ConfigWatcher, default_config, load_config
from ai_scheduler.config.schema import (
    DEFAULT_SCHEDULER_NAME,
    FILTER_PLUGINS,
    RESOURCE_SCORERS,
    SCORE_PLUGINS,
    Config,
    ConfigError,
    FrozenMap,
    GpuSettings,
    Profile,
    SchedulingSettings,
    ScoreSpec,
    ServerSettings,
    parse_config,
)

__all__ = [
    "DEFAULT_SCHEDULER_NAME",
    "FILTER_PLUGINS",
    "RESOURCE_SCORERS",
    "SCORE_PLUGINS",
    "Config",
    "ConfigError",
    "ConfigWatcher",
    "FrozenMap",
    "GpuSettings",
    "Profile",
    "SchedulingSettings",
    "ScoreSpec",
    "ServerSettings",
    "default_config",
    "load_config",
    "parse_config",
]
