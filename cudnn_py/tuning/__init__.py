"""Algorithm selection at scale: one tuning database for every measurement, model corpora, sweeps and reports.

* :class:`TuningDatabase` / :func:`default_database` - one SQLite file keyed by kind, operation signature and
  environment (cuDNN version, GPU, compute capability, driver): ``db.record(kind, key, value)`` and
  ``db.lookup(kind, key)``. The legacy algorithm cache (:class:`cudnn_py.AlgorithmCache`) and the graph plan store
  (:mod:`cudnn_py.graph.plan_store`) are views on it.
* :mod:`cudnn_py.tuning.models` - layer tables of known networks (ResNet, ViT, the Stable Diffusion UNet, Llama 3).
* :mod:`cudnn_py.tuning.sweep` / :mod:`cudnn_py.tuning.report` - ``python -m cudnn_py algos --model NAME``: every
  engine configuration of every layer, the heuristics' picks and their regret, whole-model totals, comparisons.
"""
from .database import (FILE_NAME, SCHEMA_VERSION, Record, TuningDatabase, TuningDatabaseError, TuningWarning,
                       default_database, default_path, open_database, set_default_database)
from .fingerprint import Environment, environment

__all__ = ["TuningDatabase", "TuningDatabaseError", "TuningWarning", "Record", "Environment", "environment",
           "default_database", "default_path", "open_database", "set_default_database", "SCHEMA_VERSION",
           "FILE_NAME"]
