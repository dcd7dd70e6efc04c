"""CPU checks of the float64 spatial-transformer reference by finite differences and adjoints."""
import numpy as np

from reference import spatial_transformer as ref


def test_identity_theta_reproduces_input(rng):
    x = rng.standard_normal((2, 3, 5, 6))
    theta = np.tile(np.array([[1.0, 0, 0], [0, 1.0, 0]]), (2, 1, 1))
    grid = ref.grid_generator_forward(theta, 5, 6)
    np.testing.assert_allclose(ref.sampler_forward(x, grid), x, atol=1e-12)


def test_grid_generator_adjoint(rng):
    dgrid = rng.standard_normal((2, 4, 5, 2))
    theta = rng.standard_normal((2, 2, 3))
    lhs = (ref.grid_generator_forward(theta, 4, 5) * dgrid).sum()
    rhs = (theta * ref.grid_generator_backward(dgrid)).sum()
    np.testing.assert_allclose(lhs, rhs, rtol=1e-12)


def test_sampler_backward(rng):
    x = rng.standard_normal((2, 3, 6, 7))
    grid = ref.grid_generator_forward(rng.standard_normal((2, 2, 3)) * 0.6, 4, 5)
    dy = rng.standard_normal((2, 3, 4, 5))
    dx, dgrid = ref.sampler_backward(x, grid, dy)
    r = rng.standard_normal(x.shape)  # sampler is linear in x: adjoint test
    np.testing.assert_allclose((ref.sampler_forward(r, grid) * dy).sum(), (r * dx).sum(), rtol=1e-10)
    eps, num = 1e-6, np.zeros_like(grid)
    for i in np.ndindex(grid.shape):
        p, m = grid.copy(), grid.copy()
        p[i] += eps
        m[i] -= eps
        num[i] = ((ref.sampler_forward(x, p) - ref.sampler_forward(x, m)) * dy).sum() / (2 * eps)
    np.testing.assert_allclose(dgrid, num, atol=1e-6)
