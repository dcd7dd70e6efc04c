"""Activations, forward and backward: sigmoid, ReLU, tanh, clipped ReLU, ELU, swish, identity.

::

    y = activation_forward(h, "relu", x)                                  # y allocated
    y = activation_forward(h, Activation("clipped_relu", coef=6.0), x)
    dx = activation_backward(h, Activation("swish", swish_beta=1.5), x, y, dy)

``coef`` is the ceiling of clipped ReLU and the alpha of ELU; ``swish_beta`` scales swish's sigmoid.
Identity runs as ``cudnnTransformTensor`` (a scaled copy): cuDNN's activation calls refuse
``CUDNN_ACTIVATION_IDENTITY`` (BAD_PARAM), which it keeps for ``cudnnConvolutionBiasActivationForward``.
Arrays of any rank 1 to 8 and any strides (x and y may differ) are accepted.

``engine="graph"`` runs the same function as a cached backend-API graph of one pointwise operation (plus the
alpha/beta blend) instead of the deprecated ``cudnnActivationForward/Backward``; float16, bfloat16 and float32
data of 1 to 5 dimensions, NaN propagation off. ``engine="auto"`` (the default) takes the graph where it accepts
the call and the legacy call otherwise (docs/graph_paths.md has the measurements behind it).

Raw C path::

    d = capi.cudnnActivationDescriptor_t(); capi.cudnnCreateActivationDescriptor(byref(d))
    capi.cudnnSetActivationDescriptor(d, capi.CUDNN_ACTIVATION_RELU, capi.CUDNN_NOT_PROPAGATE_NAN, 0.0)
    capi.cudnnActivationForward(h.ptr, d, byref(c_float(1)), x_desc, x.ptr, byref(c_float(0)), y_desc, y.ptr)
"""
from __future__ import annotations

from cudnn_py import capi
from cudnn_py.descriptors import ActivationDescriptor, _bool, _float
from cudnn_py.graph import legacy as gl
from cudnn_py.ops._common import check_array, desc, enum_arg, output, scalars
from cudnn_py.errors import InvalidTypeError, InvalidValueError

__all__ = ["Activation", "activation_forward", "activation_backward", "ACTIVATION_MODES"]

ACTIVATION_MODES = {
    "sigmoid": capi.CUDNN_ACTIVATION_SIGMOID, "relu": capi.CUDNN_ACTIVATION_RELU, "tanh": capi.CUDNN_ACTIVATION_TANH,
    "clipped_relu": capi.CUDNN_ACTIVATION_CLIPPED_RELU, "elu": capi.CUDNN_ACTIVATION_ELU,
    "identity": capi.CUDNN_ACTIVATION_IDENTITY, "swish": capi.CUDNN_ACTIVATION_SWISH,
}


class Activation:
    """What a ``cudnnActivationDescriptor_t`` holds; hashable, its descriptor made once and cached.

    ``mode``: a key of :data:`ACTIVATION_MODES` or a ``cudnnActivationMode_t``. ``coef``: clipped ReLU's
    ceiling (must be > 0 for it) or ELU's alpha. ``swish_beta``: swish's beta. ``nan_propagation``:
    whether ReLU passes NaN through.
    """

    __slots__ = ("mode", "coef", "swish_beta", "nan_propagation", "_desc")

    def __init__(self, mode="relu", coef: float = 0.0, swish_beta: float = 1.0, *, nan_propagation: bool = False):
        self.mode = enum_arg(mode, ACTIVATION_MODES, capi.cudnnActivationMode_t, "activation mode")
        self.coef, self.swish_beta = _float(coef, "coef"), _float(swish_beta, "swish_beta")
        if self.mode == capi.CUDNN_ACTIVATION_CLIPPED_RELU and not self.coef > 0:
            raise InvalidValueError(f"clipped_relu needs its ceiling coef > 0, got {coef!r}")
        self.nan_propagation = _bool(nan_propagation, "nan_propagation")
        self._desc = None

    @property
    def descriptor(self) -> capi.cudnnActivationDescriptor_t:
        """The ``cudnnActivationDescriptor_t`` (made on first use, destroyed with this object)."""
        if self._desc is None:
            swish = self.swish_beta if self.mode == capi.CUDNN_ACTIVATION_SWISH else None
            self._desc = ActivationDescriptor(self.mode, self.coef, nan_propagation=self.nan_propagation,
                                              swish_beta=swish)
        return self._desc.ptr

    def _key(self):
        return (int(self.mode), self.coef, self.swish_beta, self.nan_propagation)

    def __eq__(self, other):
        return isinstance(other, Activation) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        name = self.mode.name.removeprefix("CUDNN_ACTIVATION_").lower()
        return f"Activation({name!r}, coef={self.coef}, swish_beta={self.swish_beta})"


_BY_MODE: dict = {}


def _activation_desc(act) -> capi.cudnnActivationDescriptor_t | None:
    """The descriptor handle for an Activation, a core ActivationDescriptor, a mode name or enum member;
    None for identity, which cuDNN refuses in cudnnActivationForward/Backward (it is meant for the fused
    convolution-bias-activation call) and which the calls here do as a plain scaled copy instead."""
    if isinstance(act, (str, capi.cudnnActivationMode_t)):
        got = _BY_MODE.get(act)
        if got is None:
            got = _BY_MODE[act] = Activation(act)
        act = got
    if isinstance(act, Activation):
        return None if act.mode == capi.CUDNN_ACTIVATION_IDENTITY else act.descriptor
    if isinstance(act, ActivationDescriptor):
        return None if act.mode == capi.CUDNN_ACTIVATION_IDENTITY else act.ptr
    raise InvalidTypeError(f"activation must be an Activation, an ActivationDescriptor, a mode name or a "
                    f"cudnnActivationMode_t, got {act!r}")


#: legacy mode -> (graph forward mode, graph backward mode)
_GRAPH_MODES = {
    capi.CUDNN_ACTIVATION_SIGMOID: ("sigmoid_fwd", "sigmoid_bwd"), capi.CUDNN_ACTIVATION_RELU: ("relu_fwd", "relu_bwd"),
    capi.CUDNN_ACTIVATION_TANH: ("tanh_fwd", "tanh_bwd"), capi.CUDNN_ACTIVATION_CLIPPED_RELU: ("relu_fwd", "relu_bwd"),
    capi.CUDNN_ACTIVATION_ELU: ("elu_fwd", "elu_bwd"), capi.CUDNN_ACTIVATION_SWISH: ("swish_fwd", "swish_bwd"),
    capi.CUDNN_ACTIVATION_IDENTITY: ("identity", "identity"),
}


def _graph_activation(act) -> tuple[str, str, tuple]:
    """(forward mode, backward mode, pointwise settings) of an activation for the graph path."""
    if isinstance(act, (str, capi.cudnnActivationMode_t)):
        act = Activation(act)
    if isinstance(act, Activation):
        mode, coef, beta, nan = act.mode, act.coef, act.swish_beta, act.nan_propagation
    elif isinstance(act, ActivationDescriptor):
        mode, coef, nan = act.mode, act.coef, act.nan_propagation == capi.CUDNN_PROPAGATE_NAN
        beta = act.swish_beta if mode == capi.CUDNN_ACTIVATION_SWISH else 1.0
    else:
        raise InvalidTypeError(f"activation must be an Activation, an ActivationDescriptor, a mode name or a "
                        f"cudnnActivationMode_t, got {act!r}")
    if nan:
        raise gl.GraphPathRefused("engine='graph' has no NaN-propagation setting; use engine='legacy'")
    fwd, bwd = _GRAPH_MODES[mode]
    params = {capi.CUDNN_ACTIVATION_CLIPPED_RELU: (("relu_lower_clip", 0.0), ("relu_upper_clip", coef)),
              capi.CUDNN_ACTIVATION_ELU: (("elu_alpha", coef),),
              capi.CUDNN_ACTIVATION_SWISH: (("swish_beta", beta),)}.get(mode, ())
    return fwd, bwd, params


def _graph_forward(handle, activation, xa, ya, alpha, beta, auto) -> bool:
    fwd, _, params = _graph_activation(activation)
    inputs = [("x", xa)] + ([("prior", ya)] if beta else [])

    def build(g, t, _):
        return gl.blend(g, g.pointwise(fwd, t["x"], **dict(params)), t, alpha, beta)
    return gl.run_graph(handle, "activation_forward", (fwd, params, float(alpha), float(beta)), inputs, [("y", ya)],
                        build, auto=auto)


def _graph_backward(handle, activation, xa, dya, dxa, alpha, beta, auto) -> bool:
    _, bwd, params = _graph_activation(activation)
    inputs = [("dy", dya)] + ([("x", xa)] if bwd != "identity" else []) + ([("prior", dxa)] if beta else [])

    def build(g, t, _):
        d = g.pointwise(bwd, t["dy"], **dict(params)) if bwd == "identity" else \
            g.pointwise(bwd, t["dy"], t["x"], **dict(params))
        return gl.blend(g, d, t, alpha, beta)
    return gl.run_graph(handle, "activation_backward", (bwd, params, float(alpha), float(beta)), inputs,
                        [("dx", dxa)], build, auto=auto)


def activation_forward(handle, activation, x, y=None, *, alpha: float = 1.0, beta: float = 0.0,
                       engine: str = "auto"):
    """``y = alpha * act(x) + beta * y`` (``cudnnActivationForward``); returns y (allocated if not given).

    ``activation``: an :class:`Activation`, a :class:`cudnn_py.descriptors.ActivationDescriptor` or a
    mode name (then coef 0, swish_beta 1).
    ``y`` may be ``x`` itself (in place). ``engine``: "legacy", "graph" or "auto" (see the module doc).
    """
    engine = gl.engine_arg(engine)
    act = _activation_desc(activation)
    xa = check_array(x, "x", handle, floating=True)
    ya = output(y, "y", handle, xa.shape, xa.dtype)
    if gl.attempt(engine, lambda auto: _graph_forward(handle, activation, xa, ya, alpha, beta, auto)):
        return ya if y is None else y
    al, be = scalars(xa.dtype, alpha, beta)
    xd, yd = desc(xa), desc(ya)
    if act is None:  # identity
        capi.cudnnTransformTensor(handle.ptr, al, xd.ptr, xa.ptr, be, yd.ptr, ya.ptr)
    else:
        capi.cudnnActivationForward(handle.ptr, act, al, xd.ptr, xa.ptr, be, yd.ptr, ya.ptr)
    return ya if y is None else y


def activation_backward(handle, activation, x, y, dy, dx=None, *, alpha: float = 1.0, beta: float = 0.0,
                        engine: str = "auto"):
    """``dx = alpha * dL/dx + beta * dx`` from the forward's x and y and the gradient dy (``cudnnActivationBackward``).

    ``engine``: "legacy", "graph" (which computes the gradient from x; y is checked but not read) or "auto"."""
    engine = gl.engine_arg(engine)
    act = _activation_desc(activation)
    xa = check_array(x, "x", handle, floating=True)
    ya = check_array(y, "y", handle, dtype=xa.dtype, shape=xa.shape)
    dya = check_array(dy, "dy", handle, dtype=xa.dtype, shape=xa.shape)
    dxa = output(dx, "dx", handle, xa.shape, xa.dtype)
    if gl.attempt(engine, lambda auto: _graph_backward(handle, activation, xa, dya, dxa, alpha, beta, auto)):
        return dxa if dx is None else dx
    al, be = scalars(xa.dtype, alpha, beta)
    dyd, dxd = desc(dya), desc(dxa)
    if act is None:  # identity: dx = alpha * dy + beta * dx
        capi.cudnnTransformTensor(handle.ptr, al, dyd.ptr, dya.ptr, be, dxd.ptr, dxa.ptr)
        return dxa if dx is None else dx
    xd, yd = desc(xa), desc(ya)
    capi.cudnnActivationBackward(handle.ptr, act, al, yd.ptr, ya.ptr, dyd.ptr, dya.ptr, xd.ptr, xa.ptr, be,
                                 dxd.ptr, dxa.ptr)
    return dxa if dx is None else dx
