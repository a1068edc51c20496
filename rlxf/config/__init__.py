"""One typed config for every rlxf command (pydantic v2). See ``rlxf config-docs``."""

from rlxf.config.load import ConfigError, dump_config, load_config, parse_override
from rlxf.config.schema import Config

__all__ = ["Config", "ConfigError", "dump_config", "load_config", "parse_override"]
