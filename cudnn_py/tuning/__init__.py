"""Algorithm selection at scale: the runs over the tuning database (:mod:`~cudnn_py.tuning.sweep`,
:mod:`~cudnn_py.tuning.report`: ``python -m cudnn_py algos --model NAME``, every engine configuration of every layer,
the heuristics' picks and their regret, whole-model totals, comparisons).

The records themselves are :mod:`cudnn_py.tuning_records` (the core layer; this package is above the operation
families, see ``docs/design.md``); its names, and its modules as ``cudnn_py.tuning.database``, ``.fingerprint`` and
``.models``, are importable from here as before (the same module objects).
"""
import sys

from cudnn_py.tuning_records import database, fingerprint, models
from cudnn_py.tuning_records import (FILE_NAME, SCHEMA_VERSION, Environment, Record, TuningDatabase,
                                     TuningDatabaseError, TuningWarning, default_database, default_path, environment,
                                     open_database, set_default_database)

__all__ = ["TuningDatabase", "TuningDatabaseError", "TuningWarning", "Record", "Environment", "environment",
           "default_database", "default_path", "open_database", "set_default_database", "SCHEMA_VERSION",
           "FILE_NAME"]

for _module in (database, fingerprint, models):  # the old paths: the same module objects
    sys.modules[f"{__name__}.{_module.__name__.rsplit('.', 1)[1]}"] = _module
