"""The graph paths of batch norm and the normalisation API, and the calls that choose between them and the family's
legacy C call: training as one batch-norm operation (+ z and ReLU after it), inference as pointwise operations,
backward as one norm-backward operation (after a ReLU-gradient graph). A call a graph path cannot take raises
:class:`~cudnn_py.graph.legacy.GraphPathRefused`.
"""
from __future__ import annotations

from cudnn_py import capi
from cudnn_py.calls import engine_choice as ec
from cudnn_py.graph import legacy as gl
from cudnn_py.core.memory import DeviceArray, c_strides
from cudnn_py.ops import norm_args as na
from cudnn_py.ops._common import output
from cudnn_py.ops.activation import Activation, activation_of


def param_view(a: DeviceArray | None, s: na.NormSetup) -> DeviceArray | None:
    """A parameter array seen with the full parameter shape (a (C,) array as (1, C, 1, 1)); no copy."""
    if a is None or a.shape == s.pshape:
        return a
    return DeviceArray.from_parts(a.ptr, s.pshape, a.dtype, c_strides(s.pshape), a.device_id, a, None, True)


def _fused_relu(op, activation: Activation | str | int | None) -> bool:
    """Whether a fused op's activation (None: ReLU) is ReLU, the only one the graph paths fuse (ops 0: none)."""
    if int(op) == 0:
        return False
    act = "relu" if activation is None else activation
    mode = activation_of(act).mode if isinstance(act, (str, capi.cudnnActivationMode_t)) else getattr(act, "mode", None)
    if mode != capi.CUDNN_ACTIVATION_RELU:
        raise gl.GraphPathRefused(f"engine='graph' fuses ReLU only; activation {act!r} needs engine='legacy'")
    return True


def _require(s: na.NormSetup, alphas, what: str) -> None:
    """Refuse per-activation statistics (the graph operations are per channel) and blending."""
    if int(s.mode) == 0:  # per-activation
        raise gl.GraphPathRefused(f"engine='graph' {what} takes spatial (per-channel) statistics; per-activation "
                                  f"mode needs engine='legacy'")
    if tuple(float(a) for a in alphas) != (1.0, 0.0) * (len(alphas) // 2):
        raise gl.GraphPathRefused(f"engine='graph' {what} takes alpha 1 and beta 0; use engine='legacy' to blend")


def training(handle, s: na.NormSetup, sc, bi, rm, rv, sm, siv, eps, f, ya, za, relu, alphas, auto) -> bool:
    """Forward training as one graph: batch norm (running statistics updated unless factor is 0), + z, ReLU."""
    _require(s, alphas, "training")
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
                   sizes, c_call, check=lambda: None) -> tuple:
    """Fused forward training: the graph path where ``engine`` takes it, else ``c_call(y, z, scale, bias, rm, rv, sm,
    siv, eps, factor, reserve, ws_bytes)``; ``sizes(with_z)``: (workspace, reserve) bytes; ``check()``: the caller's
    graph refusals. Returns (y, sm, siv, rm, rv, reserve)."""
    za = None if z is None else na.data_array(z, "z", handle, like=s.x)
    sc, bi, rm, rv, sm, siv, eps, f = na.training_params(handle, s, *params)
    ya = output(y, "y", handle, s.x.shape, s.x.dtype, like=s.x)
    if engine != "legacy":
        sm, siv = s.or_new_pair(sm, siv, handle)

        def run(auto):
            check()
            return training(handle, s, sc, bi, rm, rv, sm, siv, eps, f, ya, za, _fused_relu(op, activation), alphas,
                            auto)
        if gl.graph_ran(engine, run):
            return ya, sm, siv, rm, rv, None
    ws_size, rs_size = sizes(za is not None)
    rsa = na.reserve_buffer(handle, reserve, rs_size, "reserve")
    sm, siv = s.or_new_pair(sm, siv, handle)
    c_call(ya, za, sc, bi, rm, rv, sm, siv, eps, f, rsa, ws_size)
    return ya, sm, siv, rm, rv, rsa


_INFERENCE = ("scale", "bias", "mean", "var")


def inference(handle, s: na.NormSetup, engine: str, key: tuple, params: tuple, epsilon, y, z, op, activation, alpha,
              beta, c_call, check=lambda: None) -> DeviceArray:
    """Forward inference: dispatch between ``c_call(sc, bi, me, va, z, eps, y)`` and the pointwise graph y = (x -
    mean) * scale / sqrt(var + eps) + bias [+ z] [ReLU], blended. Returns y."""
    za = None if z is None else na.data_array(z, "z", handle, like=s.x)
    sc, bi, me, va = (s.param(a, n, handle) for a, n in zip(params, _INFERENCE))
    eps = na.check_epsilon(epsilon)
    ya = output(y, "y", handle, s.x.shape, s.x.dtype, like=s.x)

    def graph(auto):
        check()
        fuse = _fused_relu(op, activation)
        inputs = [("x", s.x)] + [(n, param_view(a, s)) for n, a in zip(_INFERENCE, (sc, bi, me, va))]
        inputs += ([("z", za)] if za is not None else []) + ([("prior", ya)] if beta else [])

        def build(g, t, _):
            k = g.mul(t["scale"], g.pointwise("rsqrt", g.add(t["var"], eps)))
            out = g.add(g.mul(g.sub(t["x"], t["mean"]), k), t["bias"])
            out = out if za is None else g.add(out, t["z"])
            return gl.blend(g, g.relu(out) if fuse else out, t, alpha, beta)
        return gl.run_graph(handle, "batchnorm_inference", (eps, fuse, float(alpha), float(beta)), inputs,
                            [("y", ya)], build, auto=auto)
    gl.dispatch(engine, handle, key + (eps, alpha, beta, ec.signature(s.x, ya, sc)),
                lambda: c_call(sc, bi, me, va, za, eps, ya), graph, mutated=(ya,) if beta or ya.ptr == s.x.ptr else ())
    return ya


def backward(handle, s: na.NormSetup, dya, sc, sm, siv, dxa, ds, db, alphas, auto, gate=None) -> bool:
    """Backward as one norm-backward graph; ``gate`` = (y, out): first the ReLU gradient dy * (y > 0) into ``out``
    (dz, or scratch), the norm backward's dy."""
    _require(s, alphas, "backward")
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


def fused_backward(handle, s: na.NormSetup, op, activation, args: tuple, reserve, alphas, engine: str, sizes, c_call,
                   check=lambda: None) -> tuple[DeviceArray, DeviceArray, DeviceArray, DeviceArray | None]:
    """Fused backward: the graph path where ``engine`` takes it, else ``c_call(b)`` with the checked
    :class:`~cudnn_py.ops.norm_args.FusedBackward` ``b``; ``sizes()``: (workspace, reserve) bytes; ``check()``: the
    caller's graph refusals. Returns (dx, dscale, dbias, dz)."""
    ran: list[na.FusedBackward] = []

    def run(auto):
        check()
        relu = _fused_relu(op, activation)
        b = na.fused_backward_args(handle, s, op, None, *args + (None, alphas))
        ran.append(b)
        gate = (b.y, output(b.dz, "dz", handle, s.x.shape, s.x.dtype, like=s.x)) if relu else None
        return backward(handle, s, b.dy, b.scale, b.saved_mean, b.saved_inv_var, b.dx, b.dscale, b.dbias, alphas,
                        auto, gate)
    if gl.graph_ran(engine, run):
        b = ran[-1]
    else:
        b = na.fused_backward_args(handle, s, op, sizes, *args + (reserve, alphas))
        c_call(b)
    return b.dx, b.dscale, b.dbias, b.dz
