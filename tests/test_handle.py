"""Handle helpers that need no GPU."""
import threading
import types
import weakref

import pytest

from cudnn_py import capi
from cudnn_py.core.caches import handle_cache


def test_handle_cache_for_a_raw_handle_pointer_is_keyed_by_address():
    raw = capi.cudnnHandle_t(0x1234)
    assert handle_cache(raw, "x") is handle_cache(capi.cudnnHandle_t(0x1234), "x")
    assert handle_cache(raw, "x") is not handle_cache(raw, "y")


class _FakeHandle:
    """Stands in for Handle: records its device and whether it was closed (no GPU involved)."""

    made: list = []

    def __init__(self, device):
        self.device, self.closed = device, False
        _FakeHandle.made.append(self)

    def close(self):
        self.closed = True


@pytest.fixture
def fake_defaults(monkeypatch):
    import cudnn_py.core.handle
    from cudnn_py.calls import defaults as _defaults
    monkeypatch.setattr(cudnn_py.core.handle, "Handle", _FakeHandle)
    monkeypatch.setattr(_defaults, "get_device", lambda d: types.SimpleNamespace(device_id=0 if d is None else d))
    monkeypatch.setattr(_defaults, "_tls", threading.local())
    monkeypatch.setattr(_defaults, "_live", weakref.WeakSet())
    monkeypatch.setattr(_FakeHandle, "made", [])
    return _defaults


def test_default_handle_is_one_per_thread_and_device(fake_defaults):
    d = fake_defaults
    h0 = d.default_handle()
    assert d.default_handle() is h0 and d.default_handle(0) is h0 and h0.device == 0
    h1 = d.default_handle(1)
    assert h1 is not h0 and h1.device == 1 and d.default_handle(1) is h1
    other = []
    t = threading.Thread(target=lambda: other.append(d.default_handle()))
    t.start()
    t.join()
    assert other[0] is not h0 and other[0].device == 0
    assert len(_FakeHandle.made) == 3


def test_a_closed_default_handle_is_replaced(fake_defaults):
    d = fake_defaults
    h = d.default_handle()
    h.close()
    again = d.default_handle()
    assert again is not h and not again.closed


def test_default_handles_left_at_exit_are_closed(fake_defaults):
    d = fake_defaults
    hs = [d.default_handle(0), d.default_handle(1)]
    d._close_all()
    assert all(h.closed for h in hs) and not list(d._live)


def test_default_handle_is_exported():
    import cudnn_py
    from cudnn_py.calls.defaults import default_handle
    assert cudnn_py.default_handle is default_handle


def test_per_handle_caches_are_inspectable_and_clearable():
    """Issue 10 point 3: what modules cache for a handle is listed and cleared through the handle."""
    import types
    from cudnn_py.core.caches import handle_cache
    from cudnn_py.core.handle import Handle
    h = types.SimpleNamespace(cache={})
    handle_cache(h, "graph.plans")["k"] = 1
    handle_cache(h, "graph.conv").update(a=1, b=2)
    assert Handle.cache_info(h) == {"graph.plans": 1, "graph.conv": 2}
    Handle.clear_caches(h)
    assert Handle.cache_info(h) == {} and handle_cache(h, "graph.plans") == {}
