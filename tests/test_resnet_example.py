"""examples/graph_resnet_block.py on the GPU: one SGD step of the ResNet basic block through the fused graphs
(FusedBlock), the Pythonic engine="graph" calls and the legacy calls, each against the float64 NumPy reference
(every device allocation poisoned by the plugin, so an intermediate a graph never writes shows as NaN)."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

_PATH = Path(__file__).resolve().parent.parent / "examples" / "graph_resnet_block.py"


def _example():
    spec = importlib.util.spec_from_file_location("graph_resnet_block", _PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("shape", [(2, 8, 8, 8), (3, 16, 7, 9)])
def test_every_engine_matches_the_float64_step(handle, rng, shape):
    mod = _example()
    errors = mod.check(handle, shape, rng)
    assert set(errors) == {"out", "dx", "w1", "w2", "s1", "b1", "s2", "b2"}
    for what, errs in errors.items():
        assert len(errs) == len(mod.ENGINES)
        for engine, err in zip(mod.ENGINES, errs):
            assert np.isfinite(err) and err < 2e-2, (what, engine, err)


def test_fused_block_keeps_training(handle, rng):
    """Three steps of the fused block, each against a reference step from the block's own parameters: the reused
    buffers and the in-place updates stay right (dx as in the example: all but ReLU-mask flips)."""
    mod = _example()
    shape = (2, 8, 6, 6)
    params = mod.init_params(rng, shape[1])
    blk = mod.FusedBlock(handle, params, shape)
    from cudnn_py.memory import to_device
    for _ in range(3):
        x = rng.standard_normal(shape).astype(np.float16).astype(np.float64)
        dout = rng.standard_normal(shape).astype(np.float16).astype(np.float64)
        xd = mod._nhwc_view(to_device(np.ascontiguousarray(x.transpose(0, 2, 3, 1)).astype(np.float16)), shape)
        dd = mod._nhwc_view(to_device(np.ascontiguousarray(dout.transpose(0, 2, 3, 1)).astype(np.float16)), shape)
        out, dx = blk.step(xd, dd)
        out_ref, dx_ref, ref = mod.reference_step(x, dout, blk.host())
        got_dx = dx.to_numpy().astype(np.float64)
        assert np.isfinite(got_dx).all()
        assert mod.rel(out.to_numpy().astype(np.float64), out_ref) < 2e-2
        assert mod.rel(got_dx, dx_ref, mod.DX_KEEP) < 2e-2
        got = blk.host()
        for k in ref:
            assert mod.rel(got[k], ref[k]) < 2e-2, k
