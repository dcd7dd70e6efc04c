"""``cudnn-py <command>`` (or ``python -m cudnn_py <command>``): each command is a module here with ``add_parser`` and
``run``; :mod:`cudnn_py.cli.prerequisites` holds the checks every command, example, benchmark and tool makes first."""
from __future__ import annotations

import argparse
import importlib
import os
import sys

#: command name -> module under cudnn_py.cli
COMMANDS = {"info": "info", "algos": "algos_command"}


def _prog() -> str:
    """The name the user typed: ``cudnn-py`` for the console script, ``python -m cudnn_py`` for the module."""
    return "python -m cudnn_py" if os.path.basename(sys.argv[0]) == "__main__.py" else "cudnn-py"


def main(argv: list[str] | None = None) -> int:
    """Run one command.

    :param argv: the arguments after the program name (default: ``sys.argv[1:]``).
    :returns: the exit status.
    """
    from .. import __version__

    parser = argparse.ArgumentParser(prog=_prog(), description="cuDNN from Python: environment report and "
                                     "convolution algorithm sweeps.")
    parser.add_argument("--version", action="version", version=f"cudnn-py {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules = {name: importlib.import_module(f"{__name__}.{module}") for name, module in COMMANDS.items()}
    for module in modules.values():
        module.add_parser(sub)
    args = parser.parse_args(argv)
    try:
        status = modules[args.command].run(args) or 0
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader went away (``cudnn-py info | head``): stop quietly, and keep the interpreter's final
        # flush from raising again on the closed pipe
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main())
