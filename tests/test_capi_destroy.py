"""The C layer refuses a second destroy of a typed object before C (it would abort), and a destroyed
object can be created again."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import cudnn_py
from cudnn_py import capi

ROOT = Path(__file__).resolve().parents[1]


_DOUBLE_DESTROY = textwrap.dedent("""
    from ctypes import byref
    import cudnn_py
    from cudnn_py.capi import *
    d = cudnnTensorDescriptor_t()
    cudnnCreateTensorDescriptor(byref(d))
    cudnnDestroyTensorDescriptor(d)
    try:
        cudnnDestroyTensorDescriptor(d)
    except cudnn_py.InvalidStateError as e:
        assert "cudnnDestroyTensorDescriptor" in str(e) and "destroyed already" in str(e), e
        print("refused")
""")


def test_second_destroy_of_a_descriptor_is_refused_not_an_abort():
    """Today cuDNN aborts the process (double free); run in a child so that today's failure is a failure here."""
    r = subprocess.run([sys.executable, "-c", _DOUBLE_DESTROY], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "refused", (r.returncode, r.stdout, r.stderr)


def test_destroyed_typed_objects_read_null_and_can_be_created_again():
    from ctypes import byref
    import cudnn_py
    from cudnn_py import capi
    d = capi.cudnnTensorDescriptor_t()
    for _ in range(3):  # create, destroy, create again into the same object: each round is a live descriptor
        capi.cudnnCreateTensorDescriptor(byref(d))
        assert d.value
        capi.cudnnSetTensor4dDescriptor(d, capi.CUDNN_TENSOR_NCHW, capi.CUDNN_DATA_FLOAT, 1, 3, 4, 4)
        capi.cudnnDestroyTensorDescriptor(d)
        assert d.value is None
        with pytest.raises(cudnn_py.InvalidStateError, match="cudnnDestroyTensorDescriptor"):
            capi.cudnnDestroyTensorDescriptor(d)
    f = capi.cudnnFilterDescriptor_t()
    capi.cudnnCreateFilterDescriptor(byref(f))
    capi.cudnnDestroyFilterDescriptor(f)
    with pytest.raises(cudnn_py.InvalidStateError, match="cudnnDestroyFilterDescriptor"):
        capi.cudnnDestroyFilterDescriptor(f)
    b = capi.cudnnBackendDescriptor_t()
    capi.cudnnBackendCreateDescriptor(capi.CUDNN_BACKEND_TENSOR_DESCRIPTOR, byref(b))
    capi.cudnnBackendDestroyDescriptor(b)
    with pytest.raises(cudnn_py.InvalidStateError, match="cudnnBackendDestroyDescriptor"):
        capi.cudnnBackendDestroyDescriptor(b)


def test_a_never_created_null_object_still_goes_to_c():
    """Only an object this layer destroyed is refused: a NULL one nobody destroyed is cuDNN's to judge."""
    from cudnn_py import capi
    capi.cudnnDestroyTensorDescriptor(capi.cudnnTensorDescriptor_t())  # cuDNN accepts NULL


def test_pythonic_descriptors_close_after_a_capi_destroy_is_refused():
    """The Pythonic owner's guard still comes first: capi refuses an owned address, close() destroys once."""
    import cudnn_py
    from cudnn_py import capi
    t = cudnn_py.TensorDescriptor((1, 3, 4, 4), "float32")
    with pytest.raises(cudnn_py.CArgumentError, match="belongs to a cudnn_py"):
        capi.cudnnDestroyTensorDescriptor(t.ptr)
    t.close()
    t.close()


