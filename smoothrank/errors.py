"""Exceptions and warnings with messages meant for users (the CLI prints them without a traceback, as
``smoothrank: error: ...`` and ``smoothrank: warning: ...``)."""


class SmoothrankError(ValueError):
    """Base class of every user-facing smoothrank error."""


class DataFormatError(SmoothrankError):
    """A malformed input file; the message names the file and the line."""


class ConfigError(SmoothrankError):
    """An invalid configuration; the message lists every problem found."""


class SmoothrankWarning(UserWarning):
    """Base class of smoothrank's warnings: the work goes on, but the user should know."""
