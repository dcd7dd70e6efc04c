"""Attention's constants across streams on the GPU: ALiBi slopes a first call uploads on one stream, its prepared
call replayed on another stream while the first is still held, against the float64 reference."""
import numpy as np
import pytest

from cudnn_py.core.handle import Handle
from cudnn_py.core.memory import empty, to_device
from cudnn_py.core.streams import new_stream, synchronize, timer
from cudnn_py.ops import sdpa as S
from reference import sdpa as R

pytestmark = pytest.mark.gpu


def _nan(shape, dt):
    buf = empty(shape, dt)
    buf.fill_(np.nan)
    return buf


def test_alibi_replay_on_another_stream_waits_for_the_slopes_upload(rng):
    """The slopes of a first call on stream A (held, so nothing on it has run yet) are read by the replay on stream
    B only after their upload: B waits for the upload's event. A warm-up with other slopes, freed before, leaves
    its values where the pool may place the new slopes, so a replay that does not wait computes with them."""
    dt, (b, hq, s, d) = np.dtype(np.float16), (1, 8, 128, 64)
    qa, ka, va = (rng.standard_normal((b, hq, s, d)) for _ in range(3))
    want, _ = R.forward(*(R.rounded(a, dt) for a in (qa, ka, va)), alibi=R.alibi_slopes(hq), causal=True)
    on_a, on_b = new_stream(), new_stream()
    with Handle() as h:
        q, k, v = (to_device(a.astype(dt)) for a in (qa, ka, va))
        synchronize()
        with h.on_stream(on_a):  # plans the configuration (kept in the plan cache) with other slopes
            S.sdpa(h, q, k, v, causal=True, alibi=[4 * float(x) for x in R.alibi_slopes(hq)], o=_nan(q.shape, dt))
        S.sdpa_cache_clear(h)  # forgets the prepared call and its slopes; the plan stays
        h.synchronize()
        o_a, o_b = _nan(q.shape, dt), _nan(q.shape, dt)
        synchronize()
        with timer(on_a, hold=True) as t:
            with h.on_stream(on_a):
                S.sdpa(h, q, k, v, causal=True, alibi=True, o=o_a)  # uploads the slopes on the held stream
            with h.on_stream(on_b):
                S.sdpa(h, q, k, v, causal=True, alibi=True, o=o_b)  # the prepared call's replay
        print("stream A held while both calls queued:", t.held)
        on_b.sync()
        for o in (o_a, o_b):
            R.assert_close(o.to_numpy().astype(np.float64), want, "float16")
