"""CPU checks of the float64 CTC reference: brute-force path sums and finite differences."""
import numpy as np
import pytest

from reference import ctc as ref


@pytest.mark.parametrize("label", [[1], [1, 2], [2, 2], [1, 2, 1]])
def test_cost_matches_bruteforce(rng, label):
    t, a = 5, 3
    x = rng.standard_normal((t, 1, a))
    cost, _ = ref.ctc_loss(x, label, [len(label)], [t])
    np.testing.assert_allclose(cost[0], ref.ctc_cost_bruteforce(x[:, 0], label), rtol=1e-12)


def test_gradient_matches_finite_differences_with_short_inputs(rng):
    t, a = 6, 4
    x = rng.standard_normal((t, 2, a))
    labels, label_lengths, input_lengths = [1, 3, 3, 2, 1], [3, 2], [6, 4]
    cost, grad = ref.ctc_loss(x, labels, label_lengths, input_lengths)
    eps, num = 1e-6, np.zeros_like(x)
    for i in np.ndindex(x.shape):
        p, m = x.copy(), x.copy()
        p[i] += eps
        m[i] -= eps
        num[i] = (ref.ctc_loss(p, labels, label_lengths, input_lengths)[0].sum()
                  - ref.ctc_loss(m, labels, label_lengths, input_lengths)[0].sum()) / (2 * eps)
    np.testing.assert_allclose(grad, num, atol=1e-7)
    assert np.all(grad[4:, 1] == 0)


def test_min_input_length():
    assert ref.min_input_length([1, 2, 3]) == 3
    assert ref.min_input_length([1, 1, 2, 2]) == 6
    assert ref.min_input_length([]) == 0
