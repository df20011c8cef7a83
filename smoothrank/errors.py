"""Exceptions with messages meant for users (the CLI prints them without a traceback)."""


class SmoothrankError(ValueError):
    """Base class of every user-facing smoothrank error."""


class DataFormatError(SmoothrankError):
    """A malformed input file; the message names the file and the line."""


class ConfigError(SmoothrankError):
    """An invalid configuration; the message lists every problem found."""
