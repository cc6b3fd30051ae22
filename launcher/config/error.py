"""The one error a setting gets: ConfigError, one line naming the dotted key, the bad value and
the fix; and the commonest rule."""


class ConfigError(ValueError):
    """A setting that cannot run; the message is one line: key, value, fix."""


def positive(key: str, value: int) -> None:
    if value < 1:
        raise ConfigError(f"{key}={value} must be at least 1; set {key} to a positive integer")
