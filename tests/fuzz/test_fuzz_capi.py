"""Fuzz the C layer (``cudnn_py.capi``) with hostile arguments: descriptor setters and getters, and backend
``SetAttribute``/``GetAttribute``/``Finalize``, against the real library (no GPU needed).

Each target runs its examples in a subprocess (this file run as a script), which writes every example's label to a
log before running it, so that a crash (segfault, abort) fails the test naming the example that caused it. An example
passes when the call returns or raises a cudnn_py exception: :class:`CArgumentError` (refused before C),
:class:`CudnnError` (refused by cuDNN), ``ClosedError`` or ``FunctionNotAvailableError``. Anything else (a ctypes
``ArgumentError``, a builtin ``TypeError``/``OverflowError``, ...) is a finding, reported with the example.

Hostile here means wrong types, None, zero, negative, huge and out-of-range values, members of other enums, arrays
shorter or longer than their count, handles of the wrong type. Left out on purpose, because C semantics make the
caller vouch for them: nonzero int addresses (and handles cast from them) and ``void *`` data whose meaning another
argument chooses (the fused-ops parameter packs).

CI runs a bounded, seeded number; more on demand::

    CUDNN_PY_FUZZ_EXAMPLES=10000 CUDNN_PY_FUZZ_SEED=7 python -m pytest tests/fuzz/test_fuzz_capi.py -q -s
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from child import run_child

EXAMPLES = int(os.environ.get("CUDNN_PY_FUZZ_EXAMPLES", "300"))
SEED = int(os.environ.get("CUDNN_PY_FUZZ_SEED", "20261123"))
TIMEOUT = float(os.environ.get("CUDNN_PY_FUZZ_TIMEOUT", str(120 + EXAMPLES * 0.05)))
TARGETS = ("setters", "backend")

# ----------------------------------------------------------------------------------------------- the child


def _child(target: str, examples: int, seed: int, logfile: str) -> int:
    import ctypes
    import enum
    import re
    import warnings
    from collections import Counter

    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st

    from cudnn_py.clib import binding as _binding
    from cudnn_py import capi
    from cudnn_py.errors import ClosedError, CudnnError, FunctionNotAvailableError

    warnings.simplefilter("ignore", DeprecationWarning)
    accepted = (_binding.CArgumentError, CudnnError, ClosedError, FunctionNotAvailableError)
    edge_ints = [0, 1, -1, 2, 3, 4, 5, 8, 9, 255, 2 ** 31 - 1, 2 ** 31, -2 ** 31, -2 ** 31 - 1, 2 ** 32, 2 ** 32 + 1,
                 2 ** 63 - 1, 2 ** 63, -2 ** 63 - 1, 2 ** 64, 10 ** 30]
    junk = [None, "abc", "abcdefgh", b"abcdefgh", 1.5, float("nan"), float("inf"), [], [1, 2, 3], (), object(), True,
            ctypes.c_double(1.0), ctypes.c_void_p(0), 3 + 4j]
    enums = [getattr(capi, e) for e in capi.ENUMS]
    handle_types = sorted({a for f in capi.FUNCTIONS for _, a in getattr(capi, f).params
                           if isinstance(a, type) and issubclass(a, _binding.Handle)}, key=lambda t: t.__name__)

    class Context:
        """The live descriptors of one example, destroyed after it."""

        def __init__(self):
            self.made: list[tuple[object, object]] = []

        def valid(self, cls):
            kind = cls.__name__[len("cudnn"):-len("_t")]
            if cls is capi.cudnnBackendDescriptor_t:
                h = cls()
                try:
                    capi.cudnnBackendCreateDescriptor(capi.CUDNN_BACKEND_TENSOR_DESCRIPTOR, ctypes.byref(h))
                except CudnnError:
                    return None
                self.made.append((capi.cudnnBackendDestroyDescriptor, h))
                return h
            create, destroy = getattr(capi, f"cudnnCreate{kind}", None), getattr(capi, f"cudnnDestroy{kind}", None)
            if not isinstance(create, _binding.CFunction) or len(create.params) != 1 or destroy is None:
                return None  # cudnnHandle_t (no GPU here), CUDA handles, fused-ops packs: NULL
            h = cls()
            try:
                create(ctypes.byref(h))
            except CudnnError:
                return None
            self.made.append((destroy, h))
            return h

        def close(self):
            for destroy, h in reversed(self.made):
                try:
                    destroy(h)
                except CudnnError:
                    pass

    class WithPtr:
        """A stand-in for a Pythonic object carrying a handle in ``ptr``."""

        def __init__(self, ptr):
            self.ptr = ptr

        def __repr__(self):
            return f"WithPtr({self.ptr!r})"

    def int_value(draw):
        return draw(st.one_of(st.sampled_from(edge_ints), st.integers(-3, 16), st.integers(-2 ** 70, 2 ** 70)))

    def plausible_int(draw):
        return draw(st.one_of(st.integers(0, 8), st.integers(1, 64), st.sampled_from(edge_ints)))

    def handle_value(draw, cls, ctx):
        choice = draw(st.integers(0, 11))
        if choice <= 5:
            return ctx.valid(cls)
        if choice == 6:
            return draw(st.sampled_from([None, 0]))
        if choice == 7:
            return draw(st.sampled_from([1, 0x1234, 2 ** 64 - 1, -1, 2 ** 64]))
        if choice == 8:
            return draw(st.sampled_from(junk))
        other = draw(st.sampled_from(handle_types))
        value = ctx.valid(other) if other is not cls else None
        if choice == 9:
            return value
        return WithPtr(draw(st.sampled_from([ctx.valid(cls), value, 0x1234, "x"])))

    def enum_value(draw, cls):
        choice = draw(st.integers(0, 5))
        if choice <= 2:
            return draw(st.sampled_from(list(cls)))
        if choice == 3:
            return draw(st.sampled_from(list(draw(st.sampled_from(enums)))))
        if choice == 4:
            return int_value(draw)
        return draw(st.sampled_from(junk))

    def scalar_value(draw, ctype):
        if ctype in (ctypes.c_float, ctypes.c_double):
            return draw(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(edge_ints),
                                  st.sampled_from(junk)))
        choice = draw(st.integers(0, 5))
        if choice <= 2:
            return plausible_int(draw)
        return int_value(draw) if choice <= 4 else draw(st.sampled_from(junk))

    def elements(draw, target, n):
        if target in (ctypes.c_float, ctypes.c_double):
            return [draw(st.floats(-1e6, 1e6)) for _ in range(n)]
        if isinstance(target, type) and issubclass(target, ctypes.Structure):
            return [target() for _ in range(n)]
        if isinstance(target, type) and issubclass(target, ctypes.c_void_p):
            return [None] * n
        if isinstance(target, type) and issubclass(target, ctypes._CFuncPtr):
            return []  # NULL function pointers: the array's zero initialisation
        if target is ctypes.c_char:
            return [b"x"] * n
        return [plausible_int(draw) % 2 ** 15 for _ in range(n)]

    def pointer_value(draw, ptype, ctx):
        target, const = ptype.target, ptype.const
        choice = draw(st.integers(0, 9))
        n = draw(st.integers(0, 10))
        if choice <= 3:
            return (target * n)(*elements(draw, target, n))
        if choice == 4:
            return ctypes.byref(target())
        if choice == 5:
            return draw(st.sampled_from([None, 0]))
        if choice == 6:
            return [draw(st.one_of(st.sampled_from(edge_ints), st.sampled_from(junk))) for _ in range(n)]
        if choice == 7 and const:
            return elements(draw, target, n)
        wrong = ctypes.c_double if target is not ctypes.c_double else ctypes.c_int
        return draw(st.sampled_from([(wrong * 4)(), ctypes.byref(wrong()), *junk]))

    def void_value(draw, const):
        choice = draw(st.integers(0, 4))
        if choice == 0:
            return draw(st.sampled_from([None, 0]))
        if choice == 1:
            return ctypes.create_string_buffer(64)
        if choice == 2 and const:
            return bytes(draw(st.integers(16, 64)))
        if choice == 3:
            return ctypes.byref(ctypes.c_double())
        return draw(st.sampled_from(junk))

    def plausible(draw, argtype, ctx):
        """A value of the right kind (arrays of any length 0-10, small ints): what reaches cuDNN's own checks."""
        if isinstance(argtype, type):
            if issubclass(argtype, _binding.Handle):
                return ctx.valid(argtype)
            if issubclass(argtype, enum.IntEnum):
                return draw(st.sampled_from(list(argtype)))
            target = getattr(argtype, "target", None)
            if target is not None:
                n = draw(st.integers(0, 10))
                items = elements(draw, target, n)
                return (target * n)(*items)
            if argtype in (ctypes.c_void_p, _binding.const_void_p):
                return draw(st.sampled_from([None, ctypes.create_string_buffer(64)]))
            if argtype in (ctypes.c_float, ctypes.c_double):
                return draw(st.floats(-10, 10))
            if argtype in _binding.INT_RANGES:
                return draw(st.integers(0, 9))
        return value(draw, argtype, ctx)

    def value(draw, argtype, ctx):
        if isinstance(argtype, type):
            if issubclass(argtype, _binding.Handle):
                return handle_value(draw, argtype, ctx)
            if issubclass(argtype, enum.IntEnum):
                return enum_value(draw, argtype)
            if hasattr(argtype, "target") and hasattr(argtype, "const"):
                return pointer_value(draw, argtype, ctx)
            if argtype in (ctypes.c_void_p, _binding.const_void_p):
                return void_value(draw, argtype is _binding.const_void_p)
            if issubclass(argtype, ctypes._CFuncPtr):
                return draw(st.sampled_from([None, 0, "f", 1.5]))
            if argtype is ctypes.c_char_p:
                return draw(st.sampled_from([None, b"abc", "abc", 5]))
            if argtype in _binding.INT_RANGES or argtype in (ctypes.c_float, ctypes.c_double):
                return scalar_value(draw, argtype)
        raise AssertionError(f"no strategy for parameter type {argtype!r}")

    # the setters/getters that run on a CPU; fused-ops packs take void * whose meaning a label chooses
    skip = re.compile(r"FusedOps|^cudnnSetCallback$|^cudnnGetRNNWeightParams$|^cudnnGetMultiHeadAttn")
    setters = [f for f in capi.FUNCTIONS if re.match(r"cudnn(Set|Get|Derive|RNNSetClip|RNNGetClip)", f)
               and not skip.search(f) and isinstance(getattr(capi, f), _binding.CFunction)]

    def show(args):
        return ", ".join(_binding._show(a)[:60] for a in args)

    def build_setter(draw, ctx):
        name = draw(st.sampled_from(setters))
        fn = getattr(capi, name)
        mode = draw(st.integers(0, 2))  # 0: all plausible, 1: one hostile argument, 2: all hostile
        params = fn.params
        hostile = draw(st.integers(0, max(len(params) - 1, 0))) if mode == 1 else None
        args = [value(draw, a, ctx) if mode == 2 or i == hostile else plausible(draw, a, ctx)
                for i, (_, a) in enumerate(params)]
        return [(name, fn, args)]

    attr_names = list(capi.cudnnBackendAttributeName_t)
    attr_types = list(capi.cudnnBackendAttributeType_t)
    desc_types = list(capi.cudnnBackendDescriptorType_t)

    def attr_array(draw, attr_type, ctx):
        element = _binding._attribute_ctype(attr_type)
        n = draw(st.integers(0, 9))
        choice = draw(st.integers(0, 6))
        if element is ctypes.c_void_p and attr_type in (capi.CUDNN_TYPE_BACKEND_DESCRIPTOR, capi.CUDNN_TYPE_HANDLE):
            items = [ctx.valid(capi.cudnnBackendDescriptor_t)
                     if attr_type == capi.CUDNN_TYPE_BACKEND_DESCRIPTOR and draw(st.booleans()) else None
                     for _ in range(n)]
        elif element is ctypes.c_void_p:
            items = [draw(st.integers(0, 2 ** 48)) for _ in range(n)]  # VOID_PTR: stored, never read here
        elif element in (ctypes.c_float, ctypes.c_double):
            items = [draw(st.floats(allow_nan=True, allow_infinity=True)) for _ in range(n)]
        elif element is ctypes.c_bool:
            items = [draw(st.booleans()) for _ in range(n)]
        elif element is ctypes.c_char:
            items = [b"{"] * n
        elif isinstance(element, type) and issubclass(element, ctypes.Structure):
            items = [element() for _ in range(n)]
        else:
            items = [plausible_int(draw) % 2 ** 31 for _ in range(n)]
        if choice <= 2:
            converted = [i.value if isinstance(i, ctypes.c_void_p) else i for i in items]
            return (element * n)(*converted) if element else None
        if choice == 3:
            return items  # a sequence: converted by the binding
        if choice == 4:
            return draw(st.sampled_from([None, 0]))
        return draw(st.sampled_from(junk + [ctypes.byref(ctypes.c_double()), ctypes.create_string_buffer(8)]))

    def build_backend(draw, ctx):
        d = capi.cudnnBackendDescriptor_t()
        dtype = draw(st.sampled_from(desc_types))
        calls = [("cudnnBackendCreateDescriptor", capi.cudnnBackendCreateDescriptor, [dtype, ctypes.byref(d)])]
        for _ in range(draw(st.integers(1, 6))):
            attr_type = draw(st.one_of(st.sampled_from(attr_types), st.sampled_from(edge_ints)))
            count = draw(st.one_of(st.integers(0, 9), st.sampled_from(edge_ints)))
            attr_name = draw(st.one_of(st.sampled_from(attr_names), st.sampled_from(edge_ints)))
            if draw(st.integers(0, 3)):
                calls.append(("cudnnBackendSetAttribute", capi.cudnnBackendSetAttribute,
                              [d, attr_name, attr_type, count, attr_array(draw, attr_type, ctx)]))
            else:
                got = draw(st.sampled_from([ctypes.byref(ctypes.c_int64()), None, ctypes.byref(ctypes.c_int())]))
                calls.append(("cudnnBackendGetAttribute", capi.cudnnBackendGetAttribute,
                              [d, attr_name, attr_type, count, got, attr_array(draw, attr_type, ctx)]))
        if draw(st.booleans()):
            calls.append(("cudnnBackendFinalize", capi.cudnnBackendFinalize, [d]))
        calls.append(("cudnnBackendDestroyDescriptor", capi.cudnnBackendDestroyDescriptor, [d]))
        return calls

    build = {"setters": build_setter, "backend": build_backend}[target]
    log = open(logfile, "w", buffering=1)
    keep_all = bool(os.environ.get("CUDNN_PY_FUZZ_LOG_ALL"))  # every call, not just the last: for post-mortems
    stats: Counter = Counter()
    findings: list[str] = []

    @hseed(seed)
    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def run(data):
        ctx = Context()
        try:
            calls = build(data.draw, ctx)
            stats["examples"] += 1
            for name, fn, args in calls:
                label = f"{name}({show(args)})"
                if not keep_all:
                    log.seek(0)
                    log.truncate()
                log.write(label + "\n")
                stats["calls"] += 1
                try:
                    fn(*args)
                    stats["returned"] += 1
                except accepted as e:
                    stats[type(e).__name__] += 1
                    if not str(e).startswith(name):
                        findings.append(f"{label}: {type(e).__name__} does not name the function: {e}")
                except Exception as e:
                    findings.append(f"{label}: {type(e).__module__}.{type(e).__qualname__}: {str(e)[:300]}")
        finally:
            ctx.close()

    run()
    print(json.dumps({"stats": dict(stats), "findings": findings[:50], "finding_count": len(findings)}))
    return 0


# ----------------------------------------------------------------------------------------------- the test

@pytest.mark.parametrize("target", TARGETS)
def test_fuzz_capi(target, tmp_path):
    pytest.importorskip("hypothesis")
    result = run_child(Path(__file__), target, EXAMPLES, SEED, TIMEOUT, tmp_path, "C-layer fuzz target")
    stats, findings = result["stats"], result["findings"]
    print(f"{target}: {stats}")
    assert stats.get("examples", 0) >= min(EXAMPLES, 10), stats
    assert not findings, f"{result['finding_count']} finding(s), first ones:\n" + "\n".join(findings)


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]))
