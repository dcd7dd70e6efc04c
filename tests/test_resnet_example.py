"""examples/graph_resnet_block.py on the GPU: one SGD step of the ResNet basic block through the fused graphs
(FusedBlock), the Pythonic engine="graph" calls and the legacy calls, each against the float64 NumPy reference
(every device allocation poisoned by the plugin, so an intermediate a graph never writes shows as NaN)."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parent.parent / "examples" / "graph_resnet_block.py"


def _example():
    spec = importlib.util.spec_from_file_location("graph_resnet_block", _PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(2, 8, 8, 8), (3, 16, 7, 9)])
def test_every_engine_matches_the_float64_step(handle, rng, shape):
    mod = _example()
    errors = mod.check(handle, shape, rng)
    assert set(errors) == {"out", "dx", "w1", "w2", "s1", "b1", "s2", "b2"}
    for what, errs in errors.items():
        assert len(errs) == len(mod.ENGINES)
        for engine, err in zip(mod.ENGINES, errs):
            assert np.isfinite(err) and err < 2e-2, (what, engine, err)


@pytest.mark.gpu
def test_fused_block_keeps_training(handle, rng):
    """Three steps of the fused block, each against a reference step from the block's own parameters: the reused
    buffers and the in-place updates stay right."""
    mod = _example()
    shape = (2, 8, 6, 6)
    params = mod.init_params(rng, shape[1])
    blk = mod.FusedBlock(handle, params, shape)
    from cudnn_py.core.memory import to_device
    for _ in range(3):
        x = rng.standard_normal(shape).astype(np.float16).astype(np.float64)
        dout = rng.standard_normal(shape).astype(np.float16).astype(np.float64)
        xd = mod._nhwc_view(to_device(np.ascontiguousarray(x.transpose(0, 2, 3, 1)).astype(np.float16)), shape)
        dd = mod._nhwc_view(to_device(np.ascontiguousarray(dout.transpose(0, 2, 3, 1)).astype(np.float16)), shape)
        start = blk.host()
        out, dx = blk.step(xd, dd)
        got_out = out.to_numpy().astype(np.float64)
        out_ref, dx_ref, ref = mod.reference_step(x, dout, start, (blk.a1.to_numpy() > 0, got_out > 0))
        assert mod.rel(got_out, out_ref) < 2e-2
        assert mod.rel(dx.to_numpy().astype(np.float64), dx_ref) < 2e-2
        got = blk.host()
        for k in ref:
            assert mod.rel(got[k], ref[k]) < 2e-2, k


def test_reference_takes_the_device_mask_only_at_the_kink():
    """reference_step's masks: the device's side of the ReLU is taken where the pre-activation is within KINK of
    zero, never elsewhere (a wrong device mask away from zero must still show as an error)."""
    mod = _example()
    rng = np.random.default_rng(1)
    shape = (2, 4, 5, 5)
    p = mod.init_params(rng, 4)
    x, dout = rng.standard_normal(shape), rng.standard_normal(shape)
    plain = mod.reference_step(x, dout, p)
    kink = mod._relu_mask(np.array([1e-4, -1e-4, 0.5, -0.5, 1.0]), np.array([False, True, False, True, True]))
    assert kink.tolist() == [False, True, True, False, True]
    z = np.zeros(shape, bool)
    off = mod.reference_step(x, dout, p, (z, z))  # a device that zeroed every activation
    assert off[0].max() > 0.5  # away from the kink the reference keeps its own side: such a device fails the check
    assert mod.rel(off[0], plain[0]) <= 2 * mod.KINK  # and the forward output moves only by the kink's values
    own = mod.reference_step(x, dout, p, (None, plain[0] > 0))  # the reference's own side: nothing changes
    for a, b in zip(plain[:2], own[:2]):
        assert mod.rel(b, a) == 0
