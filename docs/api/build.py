"""Build the API reference (HTML, from the docstrings) with pdoc, and fail on any warning.

    pip install -e ".[docs]" --config-settings editable_mode=compat
    python docs/api/build.py [OUTPUT_DIR]      # default: docs/api/html (not checked in); open its index.html

Docstrings are reStructuredText field lists (``:param x:``, ``:returns:``, ``:raises E:``). Every warning
pdoc emits (an annotation it cannot resolve, a module that fails to import, a bad docstring) is printed
and makes the exit status 1, so CI keeps the reference clean.
"""
from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "cudnn_py"
#: not in the reference: the generator (a tool for maintainers, needing pycparser; README "Regenerating"), the
#: torch custom ops (they need torch, an optional dependency: docs/torch.md) and the prepared calls' torch outputs
NOT_PUBLIC = {"codegen", "torch", "torch_outputs"}
#: what the reference covers: the package face and every public module or package in it (a new one is included
#: without being listed here); pdoc documents each package's submodules
MODULES = ["cudnn_py"] + sorted(
    f"cudnn_py.{p.stem}" for p in PACKAGE.iterdir()
    if not p.name.startswith(("_", ".")) and p.stem not in NOT_PUBLIC
    and (p.suffix == ".py" or (p.is_dir() and any(p.glob("*.py")))))
#: private helpers are not part of the reference
EXCLUDE = [r"!cudnn_py\.ops\._common", r"!cudnn_py\.graph\.ops\.base", r"!cudnn_py\.ops\.norm_args",
           r"!cudnn_py\.ops\.norm_graphs", r"!cudnn_py\.ops\.sequence_models",
           r"!cudnn_py\.calls\.defaults", r"!cudnn_py\.clib\.binding", r"!cudnn_py\.clib\.install",
           r"!cudnn_py\.clib\.loader", r"!cudnn_py\.clib\.status"]


def _namedtuple_modules() -> None:
    """Point each documented NamedTuple's generated ``__new__`` at its class's module.

    ``collections.namedtuple`` compiles ``__new__`` in a namespace of its own, so pdoc cannot find the module
    whose names the (postponed, string) field annotations refer to, and warns for each. With ``__module__``
    set, pdoc resolves them in the right module; nothing else reads the attribute.
    """
    import importlib

    import cudnn_py
    root = Path(cudnn_py.__file__).parent
    names = {".".join(("cudnn_py", *p.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")
             for p in root.rglob("*.py")}  # cudnn_py.ops has no __init__.py: pkgutil would not walk it
    for name in sorted(n for n in names if ".codegen" not in n and not n.endswith("__main__")
                       and not n.startswith("cudnn_py.torch")):
        module = importlib.import_module(name)
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, tuple) and hasattr(obj, "_fields"):
                obj.__new__.__module__ = obj.__module__


def build(output: Path) -> list[str]:
    """Render the reference into ``output``.

    :param output: the folder to write (created if missing).
    :returns: the text of every warning pdoc emitted.
    """
    try:
        import pdoc
        import pdoc.render
    except ImportError:
        from cudnn_py.clib.install import pip_install
        raise SystemExit(f"docs/api/build.py: needs pdoc, which is not installed: {pip_install('docs')}") from None

    _namedtuple_modules()

    pdoc.render.configure(docformat="restructuredtext", footer_text="cudnn-py API reference")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pdoc.pdoc(*MODULES, *EXCLUDE, output_directory=output)
    return sorted({f"{w.category.__name__}: {w.message}" for w in caught})


def main(argv: list[str]) -> int:
    """Build, print the warnings, and say where the reference is.

    :param argv: ``[OUTPUT_DIR]``.
    :returns: 1 when pdoc warned, else 0.
    """
    out = Path(argv[0]) if argv else Path(__file__).with_name("html")
    start = time.perf_counter()
    found = build(out)
    for w in found:
        print(w, file=sys.stderr)
    pages = len(list(out.rglob("*.html")))
    print(f"API reference: {pages} pages in {out} ({time.perf_counter() - start:.1f} s), {len(found)} warnings")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
