"""smoothrank: learning to rank by direct optimisation of smoothed rank metrics.

The functional core lives in :mod:`smoothrank.metrics` (exact rank metrics under explicit
conventions), :mod:`smoothrank.gains` (the shared gain/discount vocabulary),
:mod:`smoothrank.sorting` and :mod:`smoothrank.losses` (differentiable surrogates), and
:mod:`smoothrank.data` (LETOR/SVMlight I/O and query lists). Training and the command line are
thin layers on top.
"""

__version__ = "0.1.0"
