"""``python -m cudnn_py <command>``: each command is a module here with ``add_parser`` and ``run``."""
from __future__ import annotations

import argparse
import importlib
import sys

#: command name -> module under cudnn_py.cli
COMMANDS = {"info": "info", "algos": "algos"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cudnn_py", description="cuDNN from Python.")
    sub = parser.add_subparsers(dest="command", required=True)
    modules = {}
    for name, module in COMMANDS.items():
        try:
            modules[name] = importlib.import_module(f"{__name__}.{module}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{module}":
                raise
            continue
        modules[name].add_parser(sub)
    args = parser.parse_args(argv)
    return modules[args.command].run(args) or 0


if __name__ == "__main__":
    sys.exit(main())
