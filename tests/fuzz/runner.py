"""Run one fuzz target in this process and print a JSON summary (the pytest wrapper runs this in a subprocess).

    python tests/fuzz/runner.py TARGET EXAMPLES SEED LOGFILE

Each example's label is written to LOGFILE before it runs, so that if the process dies (a segfault, an abort) the
parent knows which example killed it. An example passes when it returns, or raises an exception that
(a) is one of cudnn_py's own classes (``CudnnError`` and its families, ``ClosedError``, ...: raised only on purpose),
    or
(b) is a ``TypeError``/``ValueError`` raised by an explicit ``raise`` statement inside the cudnn_py package (a message
    we wrote), not by a builtin operation (``int('a')``, ``x < 'a'``, a dict lookup) that happened to fail there.
Anything else (KeyError, AttributeError, OverflowError, ctypes.ArgumentError, a NumPy error, a builtin TypeError) is
a finding, reported with the example and the innermost frame.
"""
from __future__ import annotations

import json
import linecache
import sys
import traceback
from collections import Counter
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(_HERE.parent), str(_HERE)]  # tests/ (helpers) and tests/fuzz (targets)


def _package_dir() -> str:
    import cudnn_py
    return str(Path(cudnn_py.__file__).resolve().parent)


def judge(exc: BaseException, pkg: str) -> str | None:
    """None when ``exc`` is an acceptable refusal; otherwise why it is a finding."""
    from cudnn_py.errors import CudnnError
    if isinstance(exc, CudnnError):
        return None
    cls = type(exc)
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = "?"
    explicit = False
    if tb is not None:
        fname, line = tb.tb_frame.f_code.co_filename, tb.tb_lineno
        where = f"{fname}:{line}"
        src = linecache.getline(fname, line).strip()
        explicit = str(Path(fname).resolve()).startswith(pkg) and src.startswith("raise")
    if cls.__module__.startswith("cudnn_py"):  # our own classes are only ever raised on purpose, with a message
        return None
    if isinstance(exc, (TypeError, ValueError)) and explicit:
        return None
    return f"{cls.__module__}.{cls.__qualname__} at {where}: {str(exc)[:300]}"


def main(target: str, examples: int, seed: int, logfile: str) -> int:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st

    import targets

    build = targets.TARGETS[target]
    pkg = _package_dir()
    log = open(logfile, "w", buffering=1)
    stats = Counter()
    findings: list[dict] = []

    @hseed(seed)
    @settings(max_examples=examples, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def run(data):
        call, label = build(data.draw)
        log.seek(0)
        log.write(label + "\n")
        log.truncate()
        stats["examples"] += 1
        try:
            call()
        except Exception as e:  # noqa: BLE001 - judged below
            why = judge(e, pkg)
            if why is None:
                stats["refused"] += 1
                stats[f"refused:{type(e).__name__}"] += 1
            else:
                stats["findings"] += 1
                if len(findings) < 25:
                    findings.append({"example": label[:600], "why": why,
                                     "trace": "".join(traceback.format_exception(e)[-3:])[-800:]})
        else:
            stats["accepted"] += 1

    run()
    log.close()
    print(json.dumps({"target": target, "stats": dict(stats), "findings": findings}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]))
