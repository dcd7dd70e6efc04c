"""Algorithm selection at scale: the runs over the tuning database (:mod:`~cudnn_py.tuning.sweep`,
:mod:`~cudnn_py.tuning.report`: ``python -m cudnn_py algos --model NAME``, every engine configuration of every layer,
the heuristics' picks and their regret, whole-model totals, comparisons).

The records themselves are :mod:`cudnn_py.tuning_records` (the core layer; this package is above the operation
families, see ``docs/design.md``); its names, and its modules as ``cudnn_py.tuning.database``, ``.fingerprint`` and
``.models``, are importable from here as before (the same module objects).
"""
from cudnn_py.tuning_records import *  # noqa: F401,F403
from cudnn_py.tuning_records import __all__, database, fingerprint, models  # noqa: F401
