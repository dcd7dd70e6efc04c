"""The ``engine="graph"`` paths of the batch-norm calls (:mod:`cudnn_py.ops.batchnorm`) and the normalisation API
(:mod:`cudnn_py.ops.normalization`): forward training as one batch-norm graph operation (running statistics
included) with an add and ReLU fused after it, inference as pointwise operations, backward as one norm-backward
operation (a fused ReLU's gradient as a pointwise graph before it). Each returns whether the graph ran; a call it
cannot take raises :class:`~cudnn_py.graph.legacy.GraphPathRefused`. The fused calls of both families (batch norm's
``..._ex``, the normalisation API) share their whole path here: :func:`fused_training`, :func:`fused_backward`.
"""
from __future__ import annotations

from cudnn_py import capi
from cudnn_py.graph import legacy as gl
from cudnn_py.memory import DeviceArray, c_strides
from cudnn_py.ops import norm_args as na
from cudnn_py.ops._common import output
from cudnn_py.ops.activation import activation_of


def param_view(a: DeviceArray | None, s: na.NormSetup) -> DeviceArray | None:
    """A parameter array seen with the full parameter shape (a (C,) array as (1, C, 1, 1)); no copy."""
    if a is None or a.shape == s.pshape:
        return a
    return DeviceArray.from_parts(a.ptr, s.pshape, a.dtype, c_strides(s.pshape), a.device_id, a, None, True)


def is_relu(act) -> bool:
    """Whether a fused op's activation is plain ReLU (the only one the graph paths fuse); None means no activation."""
    if act is None:
        return False
    mode = activation_of(act).mode if isinstance(act, (str, capi.cudnnActivationMode_t)) else getattr(act, "mode", None)
    if mode != capi.CUDNN_ACTIVATION_RELU:
        raise gl.GraphPathRefused(f"engine='graph' fuses ReLU only; activation {act!r} needs engine='legacy'")
    return True


def require_spatial(s: na.NormSetup, what: str) -> None:
    """Refuse per-activation statistics (the graph operations are per channel)."""
    if int(s.mode) == 0:  # per-activation
        raise gl.GraphPathRefused(f"engine='graph' {what} takes spatial (per-channel) statistics; per-activation "
                                  f"mode needs engine='legacy'")


def require_plain(alphas, what: str) -> None:
    """Refuse blending (alpha/beta pairs other than 1, 0)."""
    if tuple(float(a) for a in alphas) != (1.0, 0.0) * (len(alphas) // 2):
        raise gl.GraphPathRefused(f"engine='graph' {what} takes alpha 1 and beta 0; use engine='legacy' to blend")


def training(handle, s: na.NormSetup, sc, bi, rm, rv, sm, siv, eps, f, ya, za, relu, alphas, auto) -> bool:
    """Forward training as one graph: batch norm (updating running statistics unless factor is 0), then + z and
    ReLU when asked."""
    require_spatial(s, "training")
    require_plain(alphas, "training")
    update = rm is not None and f > 0
    inputs = ([("x", s.x), ("scale", param_view(sc, s)), ("bias", param_view(bi, s))]
              + ([("z", za)] if za is not None else []))
    outputs = [("y", ya), ("mean", param_view(sm, s)), ("inv_variance", param_view(siv, s))]
    if update:
        inputs += [("running_mean", param_view(rm, s)), ("running_var", param_view(rv, s))]
        outputs += [("next_running_mean", param_view(rm, s)), ("next_running_var", param_view(rv, s))]

    def build(g, t, _):
        r = g.batch_norm(t["x"], t["scale"], t["bias"], epsilon=eps, running_mean=t.get("running_mean"),
                         running_var=t.get("running_var"), momentum=f if update else 0.1)
        y = r.y if za is None else g.add(r.y, t["z"])
        y = g.relu(y) if relu else y
        return (y, r.mean, r.inv_variance) + ((r.running_mean, r.running_var) if update else ())
    return gl.run_graph(handle, "batchnorm_training", (eps, f if update else 0.0, relu), inputs, outputs, build,
                        auto=auto, relabel=False)


def fused_training(handle, s: na.NormSetup, op, activation, z, params: tuple, y, reserve, alphas, engine: str,
                   sizes, c_call, check=None) -> tuple:
    """Batch norm's ``..._ex`` and the normalisation API's forward training after their ops checks: the graph path
    where ``engine`` takes it, else ``c_call(y, z, scale, bias, rm, rv, sm, siv, eps, factor, reserve, ws_bytes)``,
    the legacy call. ``params``: the call's (scale, bias, rm, rv, sm, siv, epsilon, factor); ``sizes(with_z)``:
    (workspace, reserve) bytes; ``check()``: the caller's own graph refusals. Returns (y, sm, siv, rm, rv, reserve)."""
    za = None if z is None else na.data_array(z, "z", handle, like=s.x)
    sc, bi, rm, rv, sm, siv, eps, f = na.training_params(handle, s, *params)
    ya = output(y, "y", handle, s.x.shape, s.x.dtype, like=s.x)
    if engine != "legacy":
        sm, siv = s.or_new_pair(sm, siv, handle)

        def run(auto):
            if check is not None:
                check()
            relu = int(op) != 0 and is_relu("relu" if activation is None else activation)
            return training(handle, s, sc, bi, rm, rv, sm, siv, eps, f, ya, za, relu, alphas, auto)
        if gl.graph_ran(engine, run):
            return ya, sm, siv, rm, rv, None
    ws_size, rs_size = sizes(za is not None)
    rsa = na.reserve_buffer(handle, reserve, rs_size, "reserve")
    sm, siv = s.or_new_pair(sm, siv, handle)
    c_call(ya, za, sc, bi, rm, rv, sm, siv, eps, f, rsa, ws_size)
    return ya, sm, siv, rm, rv, rsa


def inference(handle, s: na.NormSetup, sc, bi, me, va, eps, ya, za, relu, alpha, beta, auto) -> bool:
    """Forward inference as pointwise operations: y = (x - mean) * scale / sqrt(var + eps) + bias [+ z] [ReLU],
    blended with alpha/beta."""
    inputs = [("x", s.x), ("scale", param_view(sc, s)), ("bias", param_view(bi, s)), ("mean", param_view(me, s)),
              ("var", param_view(va, s))] + ([("z", za)] if za is not None else []) + ([("prior", ya)] if beta else [])

    def build(g, t, _):
        k = g.mul(t["scale"], g.pointwise("rsqrt", g.add(t["var"], eps)))
        y = g.add(g.mul(g.sub(t["x"], t["mean"]), k), t["bias"])
        y = y if za is None else g.add(y, t["z"])
        return gl.blend(g, g.relu(y) if relu else y, t, alpha, beta)
    return gl.run_graph(handle, "batchnorm_inference", (eps, relu, float(alpha), float(beta)), inputs, [("y", ya)],
                        build, auto=auto)


def backward(handle, s: na.NormSetup, dya, sc, sm, siv, dxa, ds, db, alphas, auto, gate=None) -> bool:
    """Backward as one norm-backward graph from the saved statistics; ``gate`` = (y, out): first the ReLU
    gradient dy * (y > 0) into ``out`` (dz, or scratch), which the norm backward then reads as its dy."""
    require_spatial(s, "backward")
    require_plain(alphas, "backward")
    if sm is None:
        raise gl.GraphPathRefused("engine='graph' backward reads the forward's saved_mean and saved_inv_var; pass "
                                  "them (engine='legacy' recomputes them)")
    if gate is not None:
        y, out = gate
        if not gl.run_graph(handle, "batchnorm_relu_backward", (), [("dy", dya), ("y", y)], [("dz", out)],
                            lambda g, t, _: g.relu_backward(t["dy"], t["y"]), auto=auto):
            return False
        dya = out
    inputs = [("dy", dya), ("x", s.x), ("scale", param_view(sc, s)), ("mean", param_view(sm, s)),
              ("inv_variance", param_view(siv, s))]
    outputs = [("dx", dxa), ("dscale", param_view(ds, s)), ("dbias", param_view(db, s))]

    def build(g, t, _):
        return g.norm_backward(t["dy"], t["x"], t["scale"], mean=t["mean"], inv_variance=t["inv_variance"],
                               mode="batch")
    return gl.run_graph(handle, "batchnorm_backward", (), inputs, outputs, build, auto=auto, relabel=False)


def fused_backward(handle, s: na.NormSetup, op, act, args: tuple, alphas, engine: str,
                   check=None) -> tuple[DeviceArray, DeviceArray, DeviceArray, DeviceArray | None] | None:
    """The graph path of the fused backward calls (``args``: y, dy, scale, bias, saved_mean, saved_inv_var,
    epsilon, dx, dz, dscale, dbias): ``(dx, dscale, dbias, dz)``, or None when it did not run (``engine`` 'auto'
    and refused). ``check()``: a caller's own refusals (raising :class:`GraphPathRefused`)."""
    grads: list[tuple[DeviceArray, DeviceArray, DeviceArray, DeviceArray | None]] = []

    def run(auto):
        if check is not None:
            check()
        relu = int(op) != 0 and is_relu(act)
        b = na.fused_backward_args(handle, s, op, None, *args, None, alphas)
        gate = None
        if relu:
            gate = (b.y, b.dz if b.dz is not None else output(None, "dz", handle, s.x.shape, s.x.dtype, like=s.x))
        done = backward(handle, s, b.dy, b.scale, b.saved_mean, b.saved_inv_var, b.dx, b.dscale, b.dbias, alphas,
                        auto, gate)
        if done:
            grads.append((b.dx, b.dscale, b.dbias, b.dz))
        return done
    return grads[-1] if gl.graph_ran(engine, run) else None
