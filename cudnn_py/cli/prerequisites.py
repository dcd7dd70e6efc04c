"""What a command, example, benchmark or tool needs (a GPU: :func:`cudnn_py.core.streams.missing_device`; optional
packages), checked before any other work, so a missing piece is refused in one line instead of after minutes of
set-up or in a traceback. :func:`script_args`' ``--smoke`` checks and exits 0 without running (CI runs every
benchmark that way on a machine without a GPU).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Sequence

from cudnn_py.clib.install import pip_install
from cudnn_py.core.streams import missing_device

__all__ = ["require_gpu", "missing", "script_args"]


def require_gpu(prog: str | None = None, device: int = 0) -> None:
    """SystemExit with one line (``prog: why``; ``prog`` defaults to the script's file name) where CUDA device
    ``device`` cannot be used."""
    err = missing_device(device)
    if err is not None:
        raise SystemExit(f"{prog or os.path.basename(sys.argv[0])}: {err}")


def missing(gpu: bool = True, modules: Sequence[str] = (), extra: str = "bench", device: int = 0) -> list[str]:
    """What is missing to run: the GPU's reason, then one entry per absent module with the pip command that
    installs it (the extra ``extra`` of cudnn-py)."""
    err = missing_device(device) if gpu else None
    out = [] if err is None else [str(err)]
    absent = [m for m in modules if importlib.util.find_spec(m) is None]
    if absent:
        out.append(f"needs {', '.join(absent)}: {pip_install(extra)}")
    return out


def script_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None, *, gpu: bool = True,
                modules: Sequence[str] = (), extra: str = "bench") -> argparse.Namespace:
    """Parse a script's arguments (``argv``, default ``sys.argv[1:]``; ``--smoke`` added), then check what it needs
    before anything else: a GPU where ``gpu`` (``args.device`` where the parser has ``--device``, else 0) and the
    ``modules`` it cannot run without (the cudnn-py ``extra`` installs them). SystemExit 0 after ``--smoke``'s one
    line, or with a one-line message where something is missing."""
    parser.add_argument("--smoke", action="store_true",
                        help="check imports, arguments, the GPU and the packages needed, print one line, exit")
    args = parser.parse_args(argv)
    problems = missing(gpu, modules, extra, getattr(args, "device", 0) or 0)
    if args.smoke:
        print(f"{parser.prog}: smoke: imports and arguments fine; "
              + (f"a run would stop: {'; '.join(problems)}" if problems else "ready to run"))
        raise SystemExit(0)
    if problems:
        raise SystemExit(f"{parser.prog}: {'; '.join(problems)}")
    return args
