"""The one error a setting gets: ConfigError, one line naming the dotted key, the bad value and
the fix; and the commonest rules."""


class ConfigError(ValueError):
    """A setting that cannot run; the message is one line: key, value, fix."""


def positive(key: str, value: int) -> None:
    if value < 1:
        raise ConfigError(f"{key}={value} must be at least 1; set {key} to a positive integer")


def size_or_null(key: str, value) -> None:
    """An optional size: null means its default, so 0 (or less) is a mistake, never the default."""
    if value is not None and value < 1:
        raise ConfigError(f"{key}={value} must be a positive integer or null (null is its "
                          f"default, never 0); set {key}=null or a positive integer")


def text_or_null(key: str, value) -> None:
    """An optional path or name: null means its default, so an empty string is a mistake."""
    if value is not None and not str(value).strip():
        raise ConfigError(f"{key} is empty; set {key}=null for its default, or give it a value")
