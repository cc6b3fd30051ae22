"""A composed DictConfig into the typed Config: beside the schema rather than in it, so that the
explanation of a composition error (explain.py, which reads the schema's keys) imports the schema
and the schema imports nothing back."""

from launcher.config.error import ConfigError
from launcher.config.explain import explain, unknown_key
from launcher.config.schema import Config, unknown_keys
from launcher.config.values import check_values


def to_config(composed) -> Config:
    """The typed Config (plain dataclass instances, not Hydra nodes) from a composed DictConfig;
    runs every __post_init__ check. A key appended with `+` that the schema lacks is refused,
    not dropped; an int above its limit or a float that is not finite is refused first
    (launcher.config.values), so that no section's rule reads it."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    extra = unknown_keys(composed, Config)
    if extra:
        raise ConfigError(unknown_key(extra[0], added=True))
    try:  # resolves every ${...}: one that names nothing is a mistake in the command
        check_values(OmegaConf.to_container(composed, resolve=True), Config)
        return OmegaConf.to_object(composed)
    except OmegaConfBaseException as err:
        raise ConfigError(explain(err)) from None
