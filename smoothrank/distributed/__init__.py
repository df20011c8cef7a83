"""Training past one process.

* :mod:`smoothrank.distributed.dask`: the boosting objectives (:mod:`smoothrank.boosting`) under
  ``lightgbm.dask`` and ``xgboost.dask``, with the data partitioned so that every query lies whole
  in one partition (needs the ``dask`` extra).

Nothing is imported here, so that ``import smoothrank.distributed`` needs no optional package.
"""
