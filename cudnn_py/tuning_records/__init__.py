"""The tuning records (the core layer's half of :mod:`cudnn_py.tuning`), where the legacy algorithm cache, the
engine choice and the graph plan store keep their measurements:

* :class:`TuningDatabase` / :func:`default_database` - one SQLite file keyed by kind, operation signature and
  environment: ``db.record(kind, key, value)`` and ``db.lookup(kind, key)``.
* :class:`Environment` / :func:`environment` - cuDNN version, GPU, compute capability, driver.
* :mod:`~cudnn_py.tuning_records.models` - layer tables of known networks (ResNet, ViT, the SD UNet, Llama 3).
"""
from .database import (FILE_NAME, SCHEMA_VERSION, Record, TuningDatabase, TuningDatabaseError, TuningWarning,
                       default_database, default_path, open_database, set_default_database)
from .fingerprint import Environment, environment

__all__ = ["TuningDatabase", "TuningDatabaseError", "TuningWarning", "Record", "Environment", "environment",
           "default_database", "default_path", "open_database", "set_default_database", "SCHEMA_VERSION",
           "FILE_NAME"]
