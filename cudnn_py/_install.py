"""Install hints that work from where this copy of cudnn-py is: a checkout (``pip install -e ".[cu12]"``) or an
installed wheel (``pip install 'cudnn-py[cu12]'``). Every message that tells the user to install something asks here.
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["pip_install", "driver_extras"]

_ROOT = Path(__file__).resolve().parent.parent


def pip_install(*extras: str) -> str:
    """The pip command that adds ``extras`` to this cudnn-py.

    In a checkout (a ``pyproject.toml`` beside the package: an editable install or a run from the tree) it installs
    the checkout, named ``.`` when it is the working directory; otherwise the published package.
    """
    spec = f"[{','.join(extras)}]" if extras else ""
    if (_ROOT / "pyproject.toml").is_file():
        where = "." if Path(os.getcwd()).resolve() == _ROOT else str(_ROOT)
        return f'pip install -e "{where}{spec}"'
    return f"pip install 'cudnn-py{spec}'"


def driver_extras() -> str:
    """How to install the CUDA set for the user's driver: both extras, each with the driver it needs."""
    return (f"`{pip_install('cu12')}` (CUDA 12 driver, 525+) or `{pip_install('cu13')}` (CUDA 13 driver, 580+); "
            "`nvidia-smi` prints the driver's CUDA version")
