"""``python -m cudnn_py.codegen [--include DIR] [--out DIR] [--check]``: regenerate ``cudnn_py/capi`` from cuDNN headers."""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from . import STUBS, generate
from .parse import find_include_dir


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m cudnn_py.codegen", description=__doc__)
    p.add_argument("--include", type=Path, help="cuDNN include folder (default: the installed nvidia-cudnn wheel's)")
    p.add_argument("--stubs", type=Path, default=STUBS, help="stand-ins for the CUDA headers (default: %(default)s)")
    p.add_argument("--out", type=Path, default=Path(__file__).parent.parent / "capi", help="output folder")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if --out differs from what would be written")
    args = p.parse_args(argv)
    include = args.include or find_include_dir()
    if not args.check:
        version, paths = generate(include, args.out, args.stubs)
        print(f"wrote {len(paths)} modules from the cuDNN {version} headers in {include} to {args.out}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        version, paths = generate(include, Path(tmp), args.stubs)
        stale = [p.name for p in paths if not (args.out / p.name).is_file()
                 or (args.out / p.name).read_text() != p.read_text()]
    if stale:
        print(f"{args.out} differs from the cuDNN {version} headers in {include}: {', '.join(stale)}")
        return 1
    print(f"{args.out} is up to date with the cuDNN {version} headers in {include}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
