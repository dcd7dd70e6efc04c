"""examples/transformer_block.py: its float64 reference (forward and every gradient of the block) against finite
differences at a small size, on CPU; the GPU run of the example checks cuDNN against this reference."""
import importlib.util
import pathlib

import numpy as np
import pytest

from helpers import numeric_gradient

pytest.importorskip("ml_dtypes")
PATH = pathlib.Path(__file__).resolve().parent.parent / "examples" / "transformer_block.py"


@pytest.fixture
def block(monkeypatch):
    spec = importlib.util.spec_from_file_location("transformer_block", PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name, val in dict(B=2, S=3, E=8, H=2, MLP=6, D=4).items():
        monkeypatch.setattr(mod, name, val)
    return mod


def test_reference_gradients_match_finite_differences(block, rng):
    b, s, e, mlp = block.B, block.S, block.E, block.MLP
    p = {"Wqkv": rng.standard_normal((1, e, 3 * e)) / 3, "Wo": rng.standard_normal((1, e, e)) / 3,
         "W1": rng.standard_normal((1, e, mlp)) / 3, "W2": rng.standard_normal((1, mlp, e)) / 3,
         "gamma1": 1 + 0.1 * rng.standard_normal((1, 1, e)), "beta1": 0.1 * rng.standard_normal((1, 1, e)),
         "gamma2": 1 + 0.1 * rng.standard_normal((1, 1, e)), "beta2": 0.1 * rng.standard_normal((1, 1, e))}
    x, dy = rng.standard_normal((1, b * s, e)), rng.standard_normal((1, b * s, e))
    _, grads = block.reference(p, x, dy)

    def loss():
        return float((block.reference(p, x, dy)[0] * dy).sum())

    for name, arr in [("x", x), *p.items()]:
        np.testing.assert_allclose(grads[name], numeric_gradient(loss, arr), atol=1e-6, err_msg=name)
