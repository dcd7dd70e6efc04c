"""Algorithm selection at scale: the runs over the tuning database (sweeps, reports, comparisons), and its records.

The records themselves live in :mod:`cudnn_py.tuning_records` (the core layer; this package is above the operation
families, see ``docs/design.md``); their names and modules are importable from here as before:

* :class:`TuningDatabase` / :func:`default_database` - one SQLite file keyed by kind, operation signature and
  environment (cuDNN version, GPU, compute capability, driver): ``db.record(kind, key, value)`` and
  ``db.lookup(kind, key)``. The legacy algorithm cache (:class:`cudnn_py.AlgorithmCache`) and the graph plan store
  (:mod:`cudnn_py.graph.plan_store`) are views on it.
* :mod:`cudnn_py.tuning.models` - layer tables of known networks (ResNet, ViT, the Stable Diffusion UNet, Llama 3);
  it, :mod:`cudnn_py.tuning.database` and :mod:`cudnn_py.tuning.fingerprint` are the same module objects as
  :mod:`cudnn_py.tuning_records.models`, ``.database`` and ``.fingerprint``.
* :mod:`cudnn_py.tuning.sweep` / :mod:`cudnn_py.tuning.report` - ``python -m cudnn_py algos --model NAME``: every
  engine configuration of every layer, the heuristics' picks and their regret, whole-model totals, comparisons.
"""
from cudnn_py.tuning_records import (FILE_NAME, SCHEMA_VERSION, Environment, Record, TuningDatabase,
                                     TuningDatabaseError, TuningWarning, default_database, default_path, environment,
                                     open_database, set_default_database)

__all__ = ["TuningDatabase", "TuningDatabaseError", "TuningWarning", "Record", "Environment", "environment",
           "default_database", "default_path", "open_database", "set_default_database", "SCHEMA_VERSION",
           "FILE_NAME"]
