"""The NumPy <-> cudnnDataType_t table, against the generated enum (no GPU needed)."""
import ctypes

import numpy as np
import pytest

from cudnn_py import capi
from cudnn_py.core.dtypes import SUPPORTED_DTYPES, cudnn_dtype, numpy_dtype, scalar, scalar_type

ml_dtypes = pytest.importorskip("ml_dtypes")

TABLE = [
    (np.float32, "CUDNN_DATA_FLOAT"),
    (np.float64, "CUDNN_DATA_DOUBLE"),
    (np.float16, "CUDNN_DATA_HALF"),
    (np.int8, "CUDNN_DATA_INT8"),
    (np.uint8, "CUDNN_DATA_UINT8"),
    (np.int32, "CUDNN_DATA_INT32"),
    (np.int64, "CUDNN_DATA_INT64"),
    (np.bool_, "CUDNN_DATA_BOOLEAN"),
    (ml_dtypes.bfloat16, "CUDNN_DATA_BFLOAT16"),
    (ml_dtypes.float8_e4m3fn, "CUDNN_DATA_FP8_E4M3"),
    (ml_dtypes.float8_e5m2, "CUDNN_DATA_FP8_E5M2"),
]


@pytest.mark.parametrize("np_type,name", TABLE)
def test_round_trip(np_type, name):
    member = capi.cudnnDataType_t[name]
    for spelling in (np_type, np.dtype(np_type), np.dtype(np_type).name):
        assert cudnn_dtype(spelling) is member
    assert numpy_dtype(member) == np.dtype(np_type)
    assert numpy_dtype(int(member)) == np.dtype(np_type)
    assert np.dtype(np_type) in SUPPORTED_DTYPES


def test_enum_passes_through():
    assert cudnn_dtype(capi.CUDNN_DATA_INT8x4) is capi.cudnnDataType_t.CUDNN_DATA_INT8x4
    assert cudnn_dtype(capi.CUDNN_DATA_HALF) is capi.cudnnDataType_t.CUDNN_DATA_HALF


def test_vectorised_types_map_to_their_storage_element():
    assert numpy_dtype(capi.CUDNN_DATA_INT8x4) == np.int8
    assert numpy_dtype(capi.CUDNN_DATA_INT8x32) == np.int8
    assert numpy_dtype(capi.CUDNN_DATA_UINT8x4) == np.uint8


@pytest.mark.parametrize("bad", [np.complex64, np.uint16, "float128" if hasattr(np, "float128") else np.int16, object])
def test_unsupported_numpy_dtype_names_it(bad):
    with pytest.raises(TypeError, match=np.dtype(bad).name):
        cudnn_dtype(bad)


def test_not_a_dtype():
    with pytest.raises(TypeError, match="not a dtype"):
        cudnn_dtype(3.5)


def test_cudnn_type_without_numpy_dtype_names_it():
    with pytest.raises(TypeError, match="CUDNN_DATA_FAST_FLOAT_FOR_FP8"):
        numpy_dtype(capi.CUDNN_DATA_FAST_FLOAT_FOR_FP8)
    with pytest.raises(TypeError, match="not a cudnnDataType_t"):
        numpy_dtype(999)


def test_scalar_types():
    assert scalar_type(capi.CUDNN_DATA_DOUBLE) is ctypes.c_double
    for name in ("CUDNN_DATA_FLOAT", "CUDNN_DATA_HALF", "CUDNN_DATA_BFLOAT16", "CUDNN_DATA_INT8"):
        assert scalar_type(capi.cudnnDataType_t[name]) is ctypes.c_float
    s = scalar(capi.CUDNN_DATA_DOUBLE, 0.1)
    assert isinstance(s, ctypes.c_double) and s.value == 0.1
    f = scalar(capi.CUDNN_DATA_HALF, 2.5)
    assert isinstance(f, ctypes.c_float) and f.value == 2.5


@pytest.mark.parametrize("name,want", [("fp16", "float16"), ("BF16", "bfloat16"), ("fp32", "float32"),
                                       ("Fp64", "float64"), ("e4m3", "float8_e4m3fn"), ("fp8_e5m2", "float8_e5m2")])
def test_short_dtype_names(name, want):
    """One vocabulary (issue 10): the ML world's short names work wherever a dtype is taken."""
    from cudnn_py.core.dtypes import as_numpy_dtype, cudnn_dtype
    from cudnn_py.core.strided import array_dtype
    assert as_numpy_dtype(name).name == want == array_dtype(name).name
    assert cudnn_dtype(name) == cudnn_dtype(want)
