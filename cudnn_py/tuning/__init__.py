"""Algorithm selection at scale (docs/tuning.md): the model sweeps (:mod:`~cudnn_py.tuning.sweep`) and their
reports (:mod:`~cudnn_py.tuning.report`) behind ``python -m cudnn_py algos --model NAME``.

The records themselves are :mod:`cudnn_py.tuning_records` (the core layer); its names, and its modules as
``cudnn_py.tuning.database``, ``.fingerprint`` and ``.models``, are importable from here too (the same objects).
"""
from cudnn_py.tuning_records import *  # noqa: F401,F403
from cudnn_py.tuning_records import __all__, database, fingerprint, models  # noqa: F401
