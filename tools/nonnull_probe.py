"""Measure :data:`cudnn_py.codegen.nonnull.NONNULL`: the parameters where cuDNN dereferences NULL (the process dies).

    python tools/nonnull_probe.py                  # every setter and getter that runs without a GPU
    python tools/nonnull_probe.py cudnnGetTensorNdDescriptor ...

Each function is called with plausible arguments (fresh descriptors, generous buffers) and NULL in one handle or
pointer parameter, each case in a forked child, first with fixed arguments and then 16 seeded variations of the
others (enum members, small ints, array contents); a parameter is listed when a child died (measured with cuDNN 9.28
on a machine without a GPU). The C-layer fuzz (tests/fuzz/test_fuzz_capi.py) looks for what this misses. Refusing
NULL where cuDNN would crash cannot break a working program. Prints the table's entries, to paste into
``cudnn_py/codegen/nonnull.py``.
"""
from __future__ import annotations

import ctypes
import enum
import os
import random
import re
import sys
import warnings


def plausible(argtype, rng=None):
    """An argument cuDNN can work with for a parameter of ``argtype`` (None: leave NULL); ``rng`` (a
    ``random.Random``) varies enum members, small ints and array contents, so that more of cuDNN's paths run."""
    from cudnn_py.clib import binding as _binding
    from cudnn_py import capi
    if rng is not None and not (isinstance(argtype, type) and issubclass(argtype, _binding.Handle)):
        if isinstance(argtype, type) and issubclass(argtype, enum.IntEnum):
            return rng.choice(list(argtype))
        target = getattr(argtype, "target", None)
        if target is not None and target in _binding.INT_RANGES:
            n = rng.randint(0, 10)
            return (target * max(n, 1))(*[rng.randint(0, 9) for _ in range(max(n, 1))])
        if argtype in _binding.INT_RANGES:
            return rng.randint(0, 9)
    if issubclass(argtype, _binding.Handle):
        if argtype is capi.cudnnBackendDescriptor_t:
            h = argtype()
            capi.cudnnBackendCreateDescriptor(capi.CUDNN_BACKEND_TENSOR_DESCRIPTOR, ctypes.byref(h))
            return h
        create = getattr(capi, f"cudnnCreate{argtype.__name__[len('cudnn'):-len('_t')]}", None)
        if not isinstance(create, _binding.CFunction) or len(create.params) != 1:
            return None
        h = argtype()
        create(ctypes.byref(h))
        return h
    if issubclass(argtype, enum.IntEnum):
        return list(argtype)[0]
    target = getattr(argtype, "target", None)
    if target is not None:
        if issubclass(target, (ctypes.Structure, ctypes.c_void_p, ctypes._CFuncPtr)):
            return (target * 64)()
        if target is ctypes.c_char:
            return ctypes.create_string_buffer(256)
        return (target * 64)(*[1] * 64)
    if argtype in (ctypes.c_void_p, _binding.const_void_p):
        return ctypes.create_string_buffer(256)
    if issubclass(argtype, ctypes._CFuncPtr):
        return None
    if argtype is ctypes.c_char_p:
        return b""
    return 1.0 if argtype in (ctypes.c_float, ctypes.c_double) else 4


def probe(names: list[str] | None = None, variants: int = 16) -> dict[str, list[str]]:
    """Measure the table: for each function, the handle/pointer parameters whose NULL kills a forked child, with
    the other arguments plausible, first fixed, then varied ``variants`` times (seeded)."""
    from cudnn_py.clib import binding as _binding
    from cudnn_py import capi
    warnings.simplefilter("ignore", DeprecationWarning)
    skip = re.compile(r"FusedOps|^cudnnSetCallback$|^cudnnGetRNNWeightParams$|^cudnnGetMultiHeadAttn")
    if names is None:
        names = [f for f in capi.FUNCTIONS if re.match(r"cudnn(Set|Get|Derive|RNNSetClip|RNNGetClip|Backend)", f)
                 and not skip.search(f) and isinstance(getattr(capi, f), _binding.CFunction)]

    def dies(fn, args) -> bool:
        pid = os.fork()
        if pid == 0:
            try:
                fn.raw(*args)  # past the binding's own refusals: what cuDNN itself does
            except Exception:
                pass
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        return os.WIFSIGNALED(status)

    rng = random.Random(20261123)
    found: dict[str, list[str]] = {}
    for name in names:
        fn = getattr(capi, name)
        for variant in range(variants + 1):
            base = [plausible(a, rng if variant else None) for _, a in fn.params]
            if dies(fn, base):
                continue  # this variant dies without any NULL (an out-of-range combination): no evidence
            for i, (param, argtype) in enumerate(fn.params):
                pointer_like = issubclass(argtype, _binding.Handle) or hasattr(argtype, "target") or \
                    argtype in (ctypes.c_void_p, _binding.const_void_p)
                if pointer_like and param not in found.get(name, ()) and \
                        dies(fn, base[:i] + [None] + base[i + 1:]):
                    found.setdefault(name, []).append(param)
    return {name: [p for p, _ in getattr(capi, name).params if p in params] for name, params in found.items()}


if __name__ == "__main__":
    for name, params in probe(sys.argv[1:] or None).items():
        print(f"    {name!r}: {tuple(params)!r},")
