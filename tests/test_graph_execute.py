"""graph/execute.py on CPU: the CUDA graph's finalizer, the executors' variant-pack keys (the one array fast path)."""
from __future__ import annotations

import ctypes
import types

import numpy as np
import pytest

from cudnn_py.graph import execute as gexec
from cudnn_py.graph import runner as grunner
from cudnn_py.core.memory import DeviceArray


def test_cuda_graph_is_finalized_not_deleted():
    """One lifetime mechanism: a weakref.finalize destroys the instantiation, then the graph, once."""
    assert "__del__" not in vars(gexec.CudaGraph)
    calls = []
    rt = types.SimpleNamespace(cudaGraphExecDestroy=lambda e: calls.append(("exec", e)),
                               cudaGraphDestroy=lambda g: calls.append(("graph", g)))
    state = ["G", "E"]
    gexec._destroy_cuda_graph(rt, state)
    assert calls == [("exec", "E"), ("graph", "G")] and state == [None, None]
    gexec._destroy_cuda_graph(rt, state)  # idempotent
    assert len(calls) == 2
    half = ["G", None]  # instantiation failed: the graph alone
    gexec._destroy_cuda_graph(rt, half)
    assert calls[-1] == ("graph", "G")

    def gone(_):
        raise RuntimeError("driver shut down")
    gexec._destroy_cuda_graph(types.SimpleNamespace(cudaGraphExecDestroy=gone, cudaGraphDestroy=gone), ["G", "E"])


def test_variant_packs_are_keyed_by_array_signatures(monkeypatch):
    """Past the identity cache, an executor keys its variant packs on each array's signature and address
    (memory.array_signature, the fast path the convolution calls use too): equal arrays share a pack, another
    address or layout is validated and packed again, and errors name the graph's tensor."""
    from cudnn_py import capi
    from cudnn_py.graph import Graph
    calls, packs = [], []
    monkeypatch.setitem(grunner._BARE, "cudnnBackendExecute", lambda h, plan, vp: calls.append(vp.value) or 0)
    monkeypatch.setattr(grunner, "VariantPack", lambda uids, ptrs, ws: packs.append(ptrs) or
                        types.SimpleNamespace(ptr=ctypes.c_void_p(1000 + len(packs))))
    g = Graph()
    x = g.tensor((1, 4, 4), name="x")
    g.relu(x).set_output(True).set_name("y")
    plan = types.SimpleNamespace(graph=g, descriptor=types.SimpleNamespace(ptr=ctypes.c_void_p(7)),
                                 workspace_size=0, tag="fake")
    h = types.SimpleNamespace(ptr=capi.cudnnHandle_t(), device=0, stream=None, workspace=None)
    run = gexec.Executor(plan, h, identity_cache=0)
    run(DeviceArray(0x1000, (1, 4, 4), np.float32), DeviceArray(0x2000, (1, 4, 4), np.float32))
    run(DeviceArray(0x1000, (1, 4, 4), np.float32), DeviceArray(0x2000, (1, 4, 4), np.float32))  # new objects
    assert len(packs) == 1 and calls == [1001, 1001]
    run(DeviceArray(0x1000, (1, 4, 4), np.float32), DeviceArray(0x3000, (1, 4, 4), np.float32))
    assert len(packs) == 2 and packs[-1][:2] == [0x1000, 0x3000]
    with pytest.raises(TypeError, match="'y'.*to_device|to_device.*y"):
        run(DeviceArray(0x1000, (1, 4, 4), np.float32), np.zeros((1, 4, 4), np.float32))
