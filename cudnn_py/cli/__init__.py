"""``cudnn-py <command>`` (or ``python -m cudnn_py <command>``): each command is made of modules here
(:data:`COMMANDS`); :mod:`cudnn_py.cli.prerequisites` holds the checks every command, example, benchmark and tool
makes first."""
from __future__ import annotations

import argparse
import difflib
import importlib
import os
import re
import sys
from typing import NoReturn

#: command name -> its modules under cudnn_py.cli: the first registers the command (``add_parser``) and runs it
#: (``run``); each other adds its options (``add_arguments``) and runs instead where it is ``wanted``, the last first
#: (``algos``: the convolution sweep; ``--graph``; ``--model``, ``--compare``, ``--merge``, ``--list-models``)
COMMANDS = {"info": ("info",), "algos": ("algos", "algos_graph", "models")}

_ROLE = re.compile(r":[\w:]+:`~?([^`<]*?)\s*(?:<[^>]*>)?`")  # :func:`x`, :mod:`~a.b`, :doc:`text <target>`


def plain(text: str) -> str:
    """reStructuredText markup as plain text, for help printed in a terminal: ````x```` -> ``x``, ``:func:`~a.b```
    -> ``b``, ``:ref:`text <target>``` -> ``text``."""
    def role(m: re.Match[str]) -> str:
        name = m.group(1)
        return name.rsplit(".", 1)[-1] if m.group(0).split("`")[1].startswith("~") else name
    return _ROLE.sub(role, text).replace("``", "")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The commands' help: descriptions keep their line breaks (:class:`argparse.RawDescriptionHelpFormatter`), and
    descriptions and option help read as plain text (:func:`plain`)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return super()._fill_text(plain(text), width, indent)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = super()._get_help_string(action)
        return plain(text) if text else text


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors suggest the option or choice meant (difflib: ``--modle`` -> ``--model``)."""

    def error(self, message: str) -> NoReturn:
        super().error(message + _did_you_mean(self, message))


def _did_you_mean(parser: argparse.ArgumentParser, message: str) -> str:
    """The suggestion to add to an argparse error ``message`` of ``parser`` ('' for none): the closest option to each
    unrecognized one, or the closest choices to an invalid choice."""
    m = re.match(r"argument (.+?): invalid choice: '(.*?)'", message)
    if m:
        for action in parser._actions:
            if action.choices and m.group(1) in (*action.option_strings, action.metavar, action.dest):
                close = difflib.get_close_matches(m.group(2), [str(c) for c in action.choices], n=3)
                return f"; did you mean {_or([repr(c) for c in close])}?" if close else ""
        return ""
    if not message.startswith("unrecognized arguments: "):
        return ""
    options = parser._option_string_actions
    words = message.split(": ", 1)[1].split()
    hints = []
    for i, word in enumerate(words):
        typed, _, value = word.partition("=")
        if not typed.startswith("--") or typed in options:
            continue
        value = value or (words[i + 1] if i + 1 < len(words) else "")
        close = difflib.get_close_matches(typed, [o for o in options if o.startswith("--")], n=3, cutoff=0.7)
        # first an option whose choices take the value typed, then a transposition (--modle: --model, not --mode)
        close.sort(key=lambda o: (value not in [str(c) for c in options[o].choices or ()], sorted(o) != sorted(typed)))
        if close:
            hints.append((typed, close[0]))
    if len(hints) == 1:
        return f"; did you mean {hints[0][1]}?"
    return f"; did you mean {_or([f'{right} for {typed}' for typed, right in hints])}?" if hints else ""


def _or(items: list[str]) -> str:
    return " or ".join(items) if len(items) < 3 else f"{', '.join(items[:-1])} or {items[-1]}"


def main(argv: list[str] | None = None) -> int:
    """Run one command of ``argv`` (the arguments after the program name; default ``sys.argv[1:]``); returns the
    exit status."""
    from .. import __version__

    prog = "python -m cudnn_py" if os.path.basename(sys.argv[0]) == "__main__.py" else "cudnn-py"  # as typed
    parser = Parser(prog=prog, description="cuDNN from Python: environment report and convolution algorithm "
                    "sweeps.", formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"cudnn-py {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = {name: [importlib.import_module(f"{__name__}.{m}") for m in names] for name, names in COMMANDS.items()}
    for first, *others in modules.values():
        p = first.add_parser(sub)
        for module in others:
            module.add_arguments(p)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # refused by the command's parser (or this one's), with its usage and its options' suggestions
        sub.choices.get(args.command, parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:  # no command: what there is to run
        parser.print_help()
        return 2
    try:
        first, *others = modules[args.command]
        status = next((m for m in reversed(others) if m.wanted(args)), first).run(args) or 0
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader went away (``cudnn-py info | head``): stop quietly, and keep the interpreter's final
        # flush from raising again on the closed pipe
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main())
