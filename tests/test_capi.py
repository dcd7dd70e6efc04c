"""The generated C layer against the installed headers and the real library (no GPU needed)."""
from __future__ import annotations

import ctypes
import functools
import re
import shutil
import subprocess
from ctypes import byref
from pathlib import Path

import pytest

pytest.importorskip("pycparser", reason="the generator's tests need pycparser "
                    "(pip install -e '.[test]' --config-settings editable_mode=compat)")

import cudnn_py
from cudnn_py import capi
from cudnn_py import errors as capi_errors
from cudnn_py.clib.binding import CArgumentError
from cudnn_py.capi import *  # noqa: F403  (the way C ports use it)
from cudnn_py.codegen import STUBS
from cudnn_py.codegen.parse import HEADERS, find_include_dir

CUDNN_HEADERS = [f for f in HEADERS if f.startswith("cudnn")]


@functools.cache
def _headers() -> tuple[Path, str]:
    """(include folder, the cuDNN headers' text) of the installed cuDNN; skips the calling test when those headers
    are not the version the C layer was generated from (e.g. the GPU machine's 9.19 wheel): the comparison is
    between the generated layer and its own headers."""
    include = find_include_dir()
    version = ".".join(re.search(rf"#define {k}\s+(\d+)", (include / "cudnn_version.h").read_text()).group(1)
                       for k in ("CUDNN_MAJOR", "CUDNN_MINOR", "CUDNN_PATCHLEVEL"))
    if version != capi.HEADERS_VERSION:
        pytest.skip(f"installed cuDNN headers are {version}; the C layer was generated from {capi.HEADERS_VERSION}")
    return include, "\n".join((include / f).read_text() for f in CUDNN_HEADERS)


def test_every_declared_function_is_bound():
    declared = set(re.findall(r"\bCUDNNWINAPI\s+(\w+)\s*\(", _headers()[1]))
    print(f"{len(declared)} functions declared by the cuDNN {capi.HEADERS_VERSION} headers")
    assert declared == set(capi.FUNCTIONS)
    assert len(declared) >= 239 if capi.HEADERS_VERSION == "9.28.0" else len(declared) > 200
    for name in declared:
        fn = getattr(capi, name)
        assert fn.__name__ == name and fn.prototype.startswith(("cudnnStatus_t", "size_t", "void", "const char"))


def test_every_enumerator_and_define_is_present():
    raw = _headers()[1]
    bodies = re.findall(r"typedef\s+enum\s*\w*\s*\{([^{}]*)\}\s*(\w+)\s*;", raw)
    members = {m for body, _ in bodies
               for m in re.findall(r"^\s*(CUDNN_\w+)\b", re.sub(r"/\*.*?\*/|//[^\n]*", "", body, flags=re.S), re.M)}
    enum_types = {name for _, name in bodies}
    defines = {m for m in re.findall(r"^[ \t]*#[ \t]*define[ \t]+(CUDNN\w*)[ \t]+\S", raw, re.M)
               if not m.endswith("_H_") and m not in ("CUDNNWINAPI", "CUDNN_DEPRECATED", "CUDNN_DEPRECATED_ENUM")}
    print(f"{len(enum_types)} enums, {len(members)} enumerators, {len(defines)} #define constants")
    assert enum_types <= set(capi.ENUMS)
    missing = [m for m in members | defines if not hasattr(capi, m)]
    assert not missing
    assert set(capi.DEFINES) == defines


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to compile the headers")
def test_values_agree_with_the_c_compiler(tmp_path):
    """Every enumerator and #define value, as the C compiler sees it through the real headers."""
    names = list(dict.fromkeys([n for e in capi.ENUMS for n in getattr(capi, e).__members__] + list(capi.DEFINES)))
    floats = {n for n in capi.DEFINES if isinstance(getattr(capi, n), float)}
    body = "".join(f'printf("{n} %.17g\\n", (double)({n}));\n' if n in floats else
                   f'printf("{n} %lld\\n", (long long)({n}));\n' for n in names)
    src = tmp_path / "values.c"
    src.write_text(f'#include <stdio.h>\n#include "cudnn.h"\nint main(void) {{\n{body}return 0;\n}}\n')
    exe = tmp_path / "values"
    # the system's stdint/stddef, our stand-ins for the CUDA headers only
    cuda_stubs = tmp_path / "stubs"
    cuda_stubs.mkdir()
    for f in ("cuda_runtime_api.h", "library_types.h"):
        (cuda_stubs / f).write_text((STUBS / f).read_text())
    subprocess.run(["gcc", "-w", f"-I{cuda_stubs}", f"-I{_headers()[0]}", str(src), "-o", str(exe)], check=True)
    out = dict(line.split() for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                         check=True).stdout.splitlines())
    for n in names:
        assert float(out[n]) == pytest.approx(float(getattr(capi, n)), rel=1e-15), n
    print(f"{len(names)} values agree with gcc")


def test_enums_are_intenums_and_module_constants():
    assert capi.cudnnDataType_t.CUDNN_DATA_HALF == capi.CUDNN_DATA_HALF == 2
    assert capi.CUDNN_STATUS_BAD_PARAM == 2000
    assert capi.CUDNN_SEV_ERROR_EN == 1 << capi.CUDNN_SEV_ERROR
    assert capi.CUDNN_VERSION == capi.CUDNN_MAJOR * 10000 + capi.CUDNN_MINOR * 100 + capi.CUDNN_PATCHLEVEL


def test_status_names_match_the_library():
    # a library older than the headers names the statuses it has; those added later it calls unknown
    older = cudnn_py.version() < (capi.CUDNN_MAJOR, capi.CUDNN_MINOR, capi.CUDNN_PATCHLEVEL)
    unknown = []
    for status in capi.cudnnStatus_t:
        name = capi.cudnnGetErrorString(status).decode()
        if name == "CUDNN_UNKNOWN_STATUS" and older:
            unknown.append(status.name)
        else:
            assert name == status.name
    assert len(unknown) <= 3, unknown  # 9.14 lacks one (NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE)


def test_structs_callback_and_handles():
    perf = capi.cudnnConvolutionFwdAlgoPerf_t()
    assert [f for f, _ in perf._fields_] == ["algo", "status", "time", "memory", "determinism", "mathType", "reserved"]
    assert ctypes.sizeof(capi.cudnnFraction_t) == 16
    assert ctypes.sizeof(capi.cudnnDebug_t) > 0
    assert capi.cudnnCallback_t._restype_ is None and len(capi.cudnnCallback_t._argtypes_) == 4
    # handle types are distinct: passing one where another is expected is a TypeError, not a crash
    assert issubclass(capi.cudnnTensorDescriptor_t, ctypes.c_void_p)
    with pytest.raises(CArgumentError, match="cudnnFilterDescriptor_t where a cudnnTensorDescriptor_t belongs"):
        capi.cudnnSetTensor4dDescriptor(capi.cudnnFilterDescriptor_t(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 1, 1, 1)


def test_deprecated_declarations_are_marked():
    assert "cudnnSetFilter4dDescriptor" in capi.DEPRECATED and capi.cudnnSetFilter4dDescriptor.deprecated
    assert "cudnnCreateTensorDescriptor" not in capi.DEPRECATED and not capi.cudnnCreateTensorDescriptor.deprecated
    assert "CUDNN_STATUS_ALLOC_FAILED" in capi.DEPRECATED
    assert "cudnnFilterDescriptor_t" in capi.DEPRECATED
    assert "Deprecated" in capi.cudnnSetFilter4dDescriptor.__doc__


_QUIET = capi.cudnnCallback_t(lambda *args: None)  # kept for the process: cuDNN holds the pointer


def test_callback_delivers_messages():
    seen = []

    @capi.cudnnCallback_t
    def on_message(sev, udata, dbg, msg):
        seen.append((sev, msg))

    capi.cudnnSetCallback(capi.CUDNN_SEV_ERROR_EN, None, on_message)
    try:
        d = cudnnTensorDescriptor_t()
        cudnnCreateTensorDescriptor(byref(d))
        with pytest.raises(capi_errors.CudnnBadParamError):
            cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, -1, 1, 1, 1)
        cudnnDestroyTensorDescriptor(d)
    finally:  # mask 0 on a live callback: a NULL one would turn on cuDNN's own printer of errors to stderr
        capi.cudnnSetCallback(0, None, _QUIET)
    assert seen and all(sev == capi.CUDNN_SEV_ERROR for sev, _ in seen)
    assert any(b"cudnnSetTensor4dDescriptor" in msg for _, msg in seen), seen


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # legacy convolution descriptor calls, on purpose
def test_pointer_parameters_take_addresses_and_refuse_wrong_types():
    """``const int padA[]`` takes a ctypes array, byref() or a plain int address (device arrays), not a float*."""
    d = cudnnConvolutionDescriptor_t()
    cudnnCreateConvolutionDescriptor(byref(d))
    try:
        pads = (ctypes.c_int * 2)(1, 2)
        ones = (ctypes.c_int * 2)(1, 1)
        cudnnSetConvolutionNdDescriptor(d, 2, ctypes.addressof(pads), ones, ones, CUDNN_CROSS_CORRELATION,
                                        CUDNN_DATA_FLOAT)
        n, got = ctypes.c_int(), (ctypes.c_int * 2)()
        cudnnGetConvolutionNdDescriptor(d, 2, byref(n), got, (ctypes.c_int * 2)(), (ctypes.c_int * 2)(),
                                        byref(ctypes.c_int()), byref(ctypes.c_int()))
        assert tuple(got) == (1, 2)
        with pytest.raises(CArgumentError, match=r"parameter 3 \(int \*arrayLength\) cannot take CArgObject"):
            cudnnGetConvolutionNdDescriptor(d, 2, byref(ctypes.c_float()), got, got, got, byref(ctypes.c_int()),
                                            byref(ctypes.c_int()))
    finally:
        cudnnDestroyConvolutionDescriptor(d)
