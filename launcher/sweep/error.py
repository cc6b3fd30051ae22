"""The error of a sweep that cannot start as a whole (the sweep's ConfigError)."""


class SweepError(ValueError):
    """A sweep that cannot start as a whole; one line, like ConfigError."""
