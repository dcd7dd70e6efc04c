"""``python -m cudnn_py algos``: one command for the three sweeps, each in its module: the legacy convolution
algorithms of one configuration (:mod:`~cudnn_py.cli.algos`, the default), the engine configurations of one graph
(``--graph``, :mod:`~cudnn_py.cli.algos_graph`) and the tuning sweep over whole models (``--model``, ``--compare``,
``--merge``, ``--list-models``: :mod:`~cudnn_py.cli.models`)."""
from __future__ import annotations

import argparse

from . import algos, algos_graph, models


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``algos`` with the flags of the three sweeps; returns its parser."""
    p = algos.add_parser(subparsers)
    algos_graph.add_arguments(p)
    models.add_arguments(p)
    return p


def run(args: argparse.Namespace) -> int:
    """Run the sweep the ``algos`` arguments ask for; returns the exit status."""
    if models.wanted(args):
        return models.run(args)
    if getattr(args, "graph", None):
        return algos_graph.run(args)
    return algos.run(args)
