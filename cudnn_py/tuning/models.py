"""The old import path of :mod:`cudnn_py.tuning_records.models`: importing it gives that same module object (so a
test's monkeypatching of either name reaches both)."""
import sys

from cudnn_py.tuning_records import models as _records
from cudnn_py.tuning_records.models import *  # noqa: F401,F403 - the public names, for type checkers

sys.modules[__name__] = _records
