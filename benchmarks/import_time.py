"""How long importing cudnn_py takes, summarised from ``python -X importtime``.

Each target is imported in a fresh interpreter ``--repeats`` times. For each the table gives the median of
the import's own time (every module's own time in ``-X importtime`` after interpreter start-up) and of the
whole process's wall time (interpreter start included), then the costliest top-level packages::

    python benchmarks/import_time.py
    python benchmarks/import_time.py --repeats 20 cudnn_py "cudnn_py.capi" "cudnn_py:Handle"

A target ``module:name`` also reads ``name`` from the module (what a lazy attribute costs on first use).
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from collections import defaultdict

from cudnn_py.cli.prerequisites import script_args

DEFAULT_TARGETS = ("cudnn_py", "cudnn_py.capi", "cudnn_py:to_device", "cudnn_py:Graph")
_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|\s*(\S+)")


def statement(target: str) -> str:
    """The Python statement that imports ``target`` (``module`` or ``module:name``).

    :param target: what to import.
    :returns: the statement for ``python -c``.
    """
    module, _, name = target.partition(":")
    return f"import {module}" + (f"; {module}.{name}" if name else "")


def measure(target: str) -> tuple[float, float, dict[str, float]]:
    """Import ``target`` once in a fresh interpreter under ``-X importtime``.

    :param target: ``module`` or ``module:name``.
    :returns: (ms spent importing, i.e. every module's own time after interpreter start-up; the process's wall
        ms; own ms per top-level package).
    """
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-X", "importtime", "-c", statement(target)], capture_output=True,
                       text=True, check=True)
    wall = (time.perf_counter() - start) * 1e3
    by_package: dict[str, float] = defaultdict(float)
    seen_site = False
    for line in r.stderr.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        self_us, name = int(m.group(1)), m.group(3)
        if name == "site":  # everything before it is interpreter start-up, the same for every target
            seen_site = True
            continue
        if not seen_site:
            continue
        by_package[name.split(".")[0]] += self_us / 1e3
    # the sum of every module's own time: a submodule target also pays its parent packages, which
    # -X importtime lists as lines of their own
    return sum(by_package.values()), wall, dict(by_package)


def main(argv: list[str] | None = None) -> int:
    """Print the table.

    :param argv: the command line (see the module doc).
    :returns: 0.
    """
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("targets", nargs="*", default=DEFAULT_TARGETS, help="module or module:name (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=10, help="fresh interpreters per target (default 10)")
    p.add_argument("--top", type=int, default=6, help="packages listed per target (default 6)")
    args = script_args(p, argv, gpu=False)
    baseline = statistics.median(measure("sys")[1] for _ in range(args.repeats))
    print(f"interpreter start-up alone: {baseline:.0f} ms wall (median of {args.repeats})\n")
    print(f"{'target':<24}{'import ms':>10}{'process ms':>12}  most costly packages (self ms, one run's median)")
    for target in args.targets:
        runs = [measure(target) for _ in range(args.repeats)]
        imp = statistics.median(r[0] for r in runs)
        wall = statistics.median(r[1] for r in runs)
        packages: dict[str, list[float]] = defaultdict(list)
        for r in runs:
            for name, ms in r[2].items():
                packages[name].append(ms)
        top = sorted(((statistics.median(v), k) for k, v in packages.items()), reverse=True)[:args.top]
        print(f"{target:<24}{imp:>10.1f}{wall:>12.1f}  " + ", ".join(f"{k} {ms:.1f}" for ms, k in top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
