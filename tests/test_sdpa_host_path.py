"""The host path of a repeat attention call, without a GPU (a real Handle object whose plans, variant packs and
``cudnnBackendExecute`` are stand-ins): what a prepared call does and does not do again, and a micro-profile.

``python tests/test_sdpa_host_path.py`` prints the host time of a repeat ``cudnn_py.sdpa`` call (DeviceArrays and
stand-in torch tensors, output given), of ``Sdpa.execute`` and of the torch op ``cudnn_py.torch.sdpa`` (imported on a
stand-in torch), with the Python function calls each makes; the C call is a Python stand-in, so the numbers are the
package's own share above it (the GPU machine's
``benchmarks/host_overhead.py`` and ``benchmarks/torch_ops_bench.py`` measure the whole)."""
from __future__ import annotations

import ctypes
import itertools
import sys
import types
from unittest import mock

import ml_dtypes
import numpy as np
import pytest

from cudnn_py import Sdpa
from cudnn_py.graph import runner as grunner
from cudnn_py.calls import prepared
from cudnn_py.core.memory import DeviceArray
from cudnn_py.ops import sdpa as S
from cudnn_py.ops import sdpa_args as A
from helpers import FakeTorchDtype, FakeTorchTensor, fake_array, fake_cudnn_handle, fake_takers, fake_torch

BF16 = np.dtype(ml_dtypes.bfloat16)
SHAPE = (1, 2, 64, 64)


class _CountingWorkspace:
    """A workspace at a made-up address that counts its fetches."""

    def __init__(self) -> None:
        self.gets = 0

    def get(self, nbytes: int, stream: object = None) -> int:
        self.gets += 1
        return 0x5000_0000 if nbytes else 0


def _stand_ins(mp) -> dict:
    """Plans built without a GPU (256 bytes of workspace), variant packs and executions counted."""
    seen = {"packs": 0, "execs": 0, "args": 0, "validated_runs": 0}

    def plan(g, handle, inputs, outputs, autotune):
        return types.SimpleNamespace(graph=g, workspace_size=256, tag="fake",
                                     descriptor=types.SimpleNamespace(ptr=ctypes.c_void_p(2)))

    def pack(uids, ptrs, ws):
        seen["packs"] += 1
        return types.SimpleNamespace(ptr=ctypes.c_void_p(1000 + seen["packs"]))

    def execute(h, p, vp):
        seen["execs"] += 1
        return 0
    mp.setattr(A, "plan_graph", plan)
    mp.setattr(grunner, "VariantPack", pack)
    mp.setitem(grunner._BARE, "cudnnBackendExecute", execute)
    init, run = A.SdpaArgs.__init__, grunner.Runner.run

    def counted_init(self, *a, **kw):
        seen["args"] += 1
        init(self, *a, **kw)

    def counted_run(self, arrays):
        seen["validated_runs"] += 1
        run(self, arrays)
    mp.setattr(A.SdpaArgs, "__init__", counted_init)
    mp.setattr(grunner.Runner, "run", counted_run)
    return seen


def _handle():
    h = fake_cudnn_handle()
    h.workspace = _CountingWorkspace()
    return h


@pytest.fixture
def stand_ins(monkeypatch):
    return _stand_ins(monkeypatch)


def _arrays(torch: types.ModuleType | None = None) -> list:
    """q, k, v, o: DeviceArrays, or stand-in torch tensors of ``torch`` (:func:`helpers.fake_torch`)."""
    if torch is not None:
        return [FakeTorchTensor(SHAPE, torch.bfloat16, ptr=0x10000 * (i + 1)) for i in range(4)]
    return [DeviceArray(0x10000 * (i + 1), SHAPE, BF16) for i in range(4)]


def test_a_repeat_call_is_the_prepared_call_with_one_workspace_fetch(stand_ins):
    h = _handle()
    q, k, v, o = _arrays()
    assert S.sdpa(h, q, k, v, causal=True, o=o) is o
    assert stand_ins["args"] == 1 and stand_ins["execs"] == 1 and len(h.cache["prepared"]) == 1
    fetched = h.workspace.gets
    for n in range(2, 5):
        assert S.sdpa(h, q, k, v, causal=True, o=o) is o
        assert stand_ins["execs"] == n
        assert h.workspace.gets == fetched + n - 1  # one fetch a call: the runner's replay does not fetch again
    assert stand_ins["args"] == 1 and stand_ins["validated_runs"] == 1 and stand_ins["packs"] == 1


def test_the_stand_in_torch_tensors_take_the_prepared_call(stand_ins, monkeypatch):
    q, k, v, o = _arrays(fake_torch(monkeypatch))
    h = _handle()
    for _ in range(3):
        assert S.sdpa(h, q, k, v, causal=True, o=o) is o
    assert stand_ins["args"] == 1 and stand_ins["execs"] == 3


def test_sdpa_execute_runs_the_prepared_call(stand_ins):
    """Sdpa.execute is sdpa's prepared call of its arguments: validated once, then replayed (it validated every
    array on every execute before)."""
    h = _handle()
    q, k, v, o = _arrays()
    a = Sdpa(h, q, k, v, causal=True, o=o)
    for n in range(1, 4):
        assert a.execute() == S.SdpaOutputs(o, None)
        assert stand_ins["execs"] == n
    assert stand_ins["validated_runs"] == 1 and len(h.cache["prepared"]) == 1
    assert "fake" in repr(a)


def test_sdpa_execute_keeps_an_autotuned_plan(stand_ins, monkeypatch):
    tuned = []
    monkeypatch.setattr(A, "plan_graph", lambda g, handle, i, o, autotune: tuned.append(autotune) or
                        types.SimpleNamespace(graph=g, workspace_size=0, tag=f"tuned={autotune}",
                                              descriptor=types.SimpleNamespace(ptr=ctypes.c_void_p(2))))
    h = _handle()
    q, k, v, o = _arrays()
    a = Sdpa(h, q, k, v, o=o)
    a.autotune()
    a.execute()
    a.execute()
    assert tuned == [True] and "tuned=True" in repr(a)  # execute neither built the heuristics' plan nor tuned again


class _Tensor(FakeTorchTensor):
    """A stand-in torch tensor with what the torch op's hot path reads."""
    requires_grad = False
    device = "cuda:0"
    _addresses = itertools.cycle([0x4000_0000, 0x4010_0000])  # torch's allocator hands blocks out again

    def dim(self):
        return len(self.shape)

    def permute(self, dims):
        return _Tensor([self.shape[d] for d in dims], self.dtype, self._ptr, [self._strides[d] for d in dims])

    def new_empty(self, shape, dtype=None):
        return _Tensor(shape, dtype or self.dtype, next(self._addresses))


def _torch_ops(mp) -> types.ModuleType:
    """``cudnn_py.torch.attention`` imported on a stand-in torch (:func:`helpers.fake_torch`, what the op registration
    and the compiler touch mocked), its context on device 0 a stand-in handle (:func:`_handle`). The imported modules
    are dropped again with ``mp``."""
    torch = fake_torch(mp)
    torch.Tensor = _Tensor
    torch.__getattr__ = lambda name: getattr(rest, name)  # type: ignore[attr-defined]
    rest = mock.MagicMock(name="torch")
    rest.compiler.is_compiling = lambda: False
    rest.is_grad_enabled = lambda: True
    rest._C._any_requires_grad = lambda *ts: any(t.requires_grad for t in ts)
    rest.autograd.Function = type("Function", (), {})
    for name in ("float8_e4m3fn", "float8_e5m2"):
        setattr(torch, name, FakeTorchDtype(name))
    mp.setattr(torch, "empty", lambda shape, dtype=None, device=None: _Tensor(shape, dtype, 0x5000_0000),
               raising=False)
    for name in ("torch._library", "torch._library.autograd"):
        mp.setitem(sys.modules, name, mock.MagicMock(name=name))
    for name in [n for n in sys.modules if n.startswith("cudnn_py.torch")]:
        mp.delitem(sys.modules, name)
    mp.setattr(sys.modules["cudnn_py"], "torch", None, raising=False)  # what the import binds, dropped on undo
    import cudnn_py.torch.attention as attention
    from cudnn_py.torch import runtime
    for name in [n for n in sys.modules if n.startswith("cudnn_py.torch")]:
        mp.setitem(sys.modules, name, sys.modules.pop(name))  # removed again on undo
    mp.setattr(runtime, "_current_device", lambda: 0)
    mp.setattr(runtime, "_raw_stream", lambda device: 0)
    ctx = runtime.Context.__new__(runtime.Context)
    ctx.handle, ctx.stream, ctx.index = _handle(), 0, 0
    ctx.workspace = types.SimpleNamespace(release=lambda: None, captured=[])
    runtime._local.contexts[0] = ctx
    # the core's new outputs: DeviceArrays at made-up addresses on the first call (then as stand-in torch tensors),
    # stand-in torch tensors of torch's allocator on a replay
    fake_takers(mp)

    def tensor(shape, strides, dtype, ptr):
        return _Tensor(shape, getattr(torch, np.dtype(dtype).name), ptr, strides)
    hooks = types.SimpleNamespace(convert=lambda a: tensor(a.shape, a.strides, a.dtype, a.ptr), allocator=lambda
                                  shape, strides, dtype, device: lambda handle: (lambda t: (t, t.data_ptr()))(
                                      tensor(shape, strides, dtype, fake_array(shape, dtype, strides).ptr)))
    mp.setattr(prepared, "_hooks", lambda pkg: hooks)
    return attention


def _qkv(torch, **kw) -> list:
    return [_Tensor(SHAPE, torch.bfloat16, ptr=0x10000 * (i + 1), **kw) for i in range(3)]


def test_the_torch_op_repeat_call_is_the_core_prepared_call(stand_ins, monkeypatch):
    """cudnn_py.torch.sdpa's eager hot path: torch's own tensors into cudnn_py.sdpa's prepared call (validated once),
    o (and stats) in q's layout; a tensor it cannot take as it is goes to the checked path."""
    ops = _torch_ops(monkeypatch)
    q, k, v = _qkv(sys.modules["torch"])
    for n in range(1, 4):
        o = ops.sdpa(q, k, v, causal=True)
        assert type(o) is _Tensor and o.shape == SHAPE and stand_ins["execs"] == n
    o, stats = ops.sdpa(q, k, v, causal=True, return_stats=True)
    assert stats.shape == (1, 2, 64, 1) and stand_ins["execs"] == 4 and stand_ins["args"] == 2
    checked = []
    monkeypatch.setattr(ops, "_checked", lambda *a: checked.append(a) or "checked")
    bshd = (64 * 2 * 64, 64, 2 * 64, 1)
    assert ops.sdpa(*_qkv(sys.modules["torch"], strides=bshd), causal=True).stride() == bshd  # o in q's layout
    head_strided = _Tensor(SHAPE, q.dtype, strides=(2 * 64 * 128, 64 * 128, 128, 2))
    grad = _Tensor(SHAPE, q.dtype)
    grad.requires_grad = True
    for args in ((head_strided, k, v), (q, grad, v), (q, k, _Tensor((2, 64, 64), q.dtype))):
        assert ops.sdpa(*args) == "checked"
    assert ops.sdpa(q, k, v, bias=q) == "checked" and len(checked) == 4
    # tensors of another device than the current one miss the guard (it holds the device) and run on their own
    monkeypatch.setattr(ops, "context", lambda dev: types.SimpleNamespace(run=lambda fn, *a, **kw: f"ran on {dev}"))
    assert ops.sdpa(*_qkv(sys.modules["torch"], device=1), causal=True) == "ran on 1"
    runtime = sys.modules["cudnn_py.torch.runtime"]
    monkeypatch.setattr(runtime._local, "contexts", {})
    monkeypatch.setattr(runtime, "_current_device", None)  # torch's CUDA is not touched before a thread's first call
    assert runtime.replay(S.sdpa, (q, k, v), {"causal": True}) is prepared.MISS


def _profile() -> None:  # pragma: no cover - run by hand
    import cProfile
    import pstats
    import timeit
    mp = pytest.MonkeyPatch()
    _stand_ins(mp)
    torch = fake_torch(mp)

    def report(label: str, call) -> None:
        call()
        n = 2000
        us = min(timeit.repeat(call, number=n, repeat=25)) / n * 1e6
        pr = cProfile.Profile()
        pr.runcall(lambda: [call() for _ in range(1000)])
        st = pstats.Stats(pr)
        print(f"{label}: {us:.2f} us a repeat call, {st.total_calls / 1000 - 2:.0f} Python-level calls (stand-in C "
              f"call; the machine's load moves the time, not the count)")
    for label, pkg in (("DeviceArrays", None), ("stand-in torch tensors", torch)):
        h = _handle()
        q, k, v, o = _arrays(pkg)
        report(f"sdpa, {label}, output given", lambda: S.sdpa(h, q, k, v, causal=True, o=o))
    h = _handle()
    q, k, v, o = _arrays()
    report("Sdpa.execute, DeviceArrays", Sdpa(h, q, k, v, causal=True, o=o).execute)
    ops = _torch_ops(mp)
    q, k, v = _qkv(sys.modules["torch"])
    report("cudnn_py.torch.sdpa, stand-in torch, o allocated", lambda: ops.sdpa(q, k, v, causal=True))
    mp.undo()


if __name__ == "__main__":
    _profile()
