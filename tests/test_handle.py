"""Handle helpers that need no GPU."""
from cudnn_py import capi
from cudnn_py.handle import handle_cache


def test_handle_cache_for_a_raw_handle_pointer_is_keyed_by_address():
    raw = capi.cudnnHandle_t(0x1234)
    assert handle_cache(raw, "x") is handle_cache(capi.cudnnHandle_t(0x1234), "x")
    assert handle_cache(raw, "x") is not handle_cache(raw, "y")
