"""Exceptions and warnings with messages meant for users (the CLI prints them without a traceback, as
``smoothrank: error: ...`` and ``smoothrank: warning: ...``)."""


class SmoothrankError(ValueError):
    """Base class of every user-facing smoothrank error."""


class DataFormatError(SmoothrankError):
    """A malformed input file; the message names the file and the line."""


class IndexBaseError(DataFormatError):
    """A file's feature indices disagree with the index base it is read with (``zero_based``): the
    callers that chose that base for the user (``predict``, a training config's valid/test) say why."""


class ConfigError(SmoothrankError):
    """An invalid configuration; the message lists every problem found."""


class SmoothrankWarning(UserWarning):
    """Base class of smoothrank's warnings: the work goes on, but the user should know."""


class TrainingError(SmoothrankError):
    """Training or scoring cannot go on (e.g. the loss became NaN); the message says where."""


class TrainingWarning(SmoothrankWarning):
    """The run will train, but not usefully (e.g. no query of the training split can be ranked)."""


class ShortEpochWarning(SmoothrankWarning):
    """An epoch is only a few optimiser steps (few training queries for ``training.batch_size``):
    epochs are then coarse units of training, and selecting one of them is close to chance. Not a
    :class:`TrainingWarning`: the run trains usefully, only its epochs are coarse."""
