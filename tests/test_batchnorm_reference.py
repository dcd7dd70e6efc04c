"""CPU checks of the float64 batch-norm reference (tests/reference/batchnorm.py) by finite differences."""
import numpy as np
import pytest

from helpers import numeric_gradient
from reference import batchnorm as ref


@pytest.mark.parametrize("mode", ["spatial", "per_activation"])
@pytest.mark.parametrize("fused", [False, True])
def test_backward_matches_finite_differences(rng, mode, fused):
    x = rng.standard_normal((3, 4, 2, 3))
    s = rng.standard_normal(ref.param_shape(x.shape, mode))
    b = rng.standard_normal(s.shape)
    dy = rng.standard_normal(x.shape)
    z = rng.standard_normal(x.shape) if fused else None

    def loss():
        return (dy * ref.forward_training(x, s, b, mode, z=z, relu=fused)["y"]).sum()

    y = ref.forward_training(x, s, b, mode, z=z, relu=fused)["y"]
    got = ref.backward(x, dy, s, mode, y=y, relu=fused, with_z=fused)
    np.testing.assert_allclose(got["dx"], numeric_gradient(loss, x), atol=1e-7)
    np.testing.assert_allclose(got["dscale"], numeric_gradient(loss, s), atol=1e-7)
    np.testing.assert_allclose(got["dbias"], numeric_gradient(loss, b), atol=1e-7)
    if fused:
        np.testing.assert_allclose(got["dz"], numeric_gradient(loss, z), atol=1e-7)


def test_training_statistics_and_running_update(rng):
    x = rng.standard_normal((5, 3, 4, 4)) * 2 + 1
    s, b = np.ones((1, 3, 1, 1)), np.zeros((1, 3, 1, 1))
    rm, rv = rng.standard_normal((1, 3, 1, 1)), rng.random((1, 3, 1, 1))
    out = ref.forward_training(x, s, b, "spatial", eps=1e-3, factor=0.25, running_mean=rm, running_var=rv)
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    var = x.var(axis=(0, 2, 3), keepdims=True)
    np.testing.assert_allclose(out["mean"], mean)
    np.testing.assert_allclose(out["inv_var"], 1 / np.sqrt(var + 1e-3))
    np.testing.assert_allclose(out["running_mean"], 0.25 * mean + 0.75 * rm)
    np.testing.assert_allclose(out["running_var"], 0.25 * x.var(axis=(0, 2, 3), ddof=1, keepdims=True) + 0.75 * rv)
    # normalised output has zero mean and (almost) unit variance per channel
    np.testing.assert_allclose(out["y"].mean(axis=(0, 2, 3)), 0, atol=1e-12)
    inf = ref.forward_inference(x, s, b, mean, var, "spatial", eps=1e-3)
    np.testing.assert_allclose(inf, out["y"])
