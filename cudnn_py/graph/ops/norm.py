"""Statistics and normalisation as graph operations (layer, RMS, instance, batch and adaptive layer norm, batch-norm
finalize and backward weights).

Layer, RMS and adaptive layer norm normalise over the trailing dims the scale spans (scale (1, C, H, W) for x
(N, C, H, W): each sample; (1, 1, D) for x (B, S, D): each token), instance norm over the spatial dims, batch norm
over all but the channel dim. Statistics keep x's rank with size 1 on those dims.
"""
from __future__ import annotations

from typing import NamedTuple

from cudnn_py import capi
from cudnn_py.core.args import float_arg
from cudnn_py.errors import InvalidValueError

from .base import Builder, LowerContext, Op

__all__ = ["GenStats", "NormForward", "NormBackward", "BNFinalize", "BNBackwardWeights", "NormBuilders",
           "NORM_MODES", "BatchNormOutputs", "BNFinalizeOutputs", "BNBackwardWeightsOutputs", "norm_axes",
           "stat_shape"]

#: short name -> ``cudnnBackendNormMode_t`` member name
NORM_MODES = {"layer": "CUDNN_LAYER_NORM", "rms": "CUDNN_RMS_NORM", "instance": "CUDNN_INSTANCE_NORM",
              "batch": "CUDNN_BATCH_NORM", "ada_layer": "CUDNN_ADA_LAYER_NORM"}
_LAYER_LIKE = ("layer", "rms", "ada_layer")
#: role -> tensor attribute of each operation
_FWD_ATTRS = {"x": "xdesc", "y": "ydesc", "scale": "scale_desc", "bias": "bias_desc", "epsilon": "epsilon_desc",
              "mean": "mean_desc", "inv_variance": "inv_variance_desc", "momentum": "exp_avg_factor_desc",
              "running_mean": "input_running_mean_desc", "running_var": "input_running_var_desc",
              "next_running_mean": "output_running_mean_desc", "next_running_var": "output_running_var_desc"}
_BWD_ATTRS = {"x": "xdesc", "dy": "dydesc", "scale": "scale_desc", "mean": "mean_desc",
              "inv_variance": "inv_variance_desc", "dx": "dxdesc", "dscale": "dscale_desc", "dbias": "dbias_desc"}
_FIN_ATTRS = {"sum": "y_sum_desc", "sqsum": "y_sq_sum_desc", "scale": "scale_desc", "bias": "bias_desc",
              "epsilon": "epsilon_desc", "accum_count": "accum_count_desc", "momentum": "exp_averate_factor_desc",
              "running_mean": "prev_running_mean_desc", "running_var": "prev_running_var_desc",
              "eq_scale": "eq_scale_desc", "eq_bias": "eq_bias_desc", "mean": "saved_mean_desc",
              "inv_std": "saved_inv_std_desc", "next_running_mean": "updated_running_mean_desc",
              "next_running_var": "updated_running_var_desc"}
_DBN_ATTRS = {"x": "x_desc", "dy": "dy_desc", "mean": "mean_desc", "inv_std": "invstd_desc",
              "scale": "bn_scale_desc", "dscale": "dbn_scale_desc", "dbias": "dbn_bias_desc",
              "eq_dy_scale": "eq_dy_scale_desc", "eq_x_scale": "eq_x_scale_desc",
              "eq_bias": "CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_BIAS"}  # its name lacks _DESC


class BatchNormOutputs(NamedTuple):
    """Batch-norm training outputs: y, saved mean and inverse variance, updated running statistics (None unless
    running statistics were given)."""
    y: object
    mean: object
    inv_variance: object
    running_mean: object = None
    running_var: object = None


class BNFinalizeOutputs(NamedTuple):
    """:meth:`NormBuilders.bn_finalize` outputs."""
    eq_scale: object
    eq_bias: object
    mean: object
    inv_std: object
    running_mean: object
    running_var: object


class BNBackwardWeightsOutputs(NamedTuple):
    """:meth:`NormBuilders.bn_backward_weights` outputs: dx = eq_dy_scale * dy + eq_x_scale * x + eq_bias."""
    dscale: object
    dbias: object
    eq_dy_scale: object
    eq_x_scale: object
    eq_bias: object


def norm_axes(mode: str, x_shape: tuple[int, ...], scale_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The dims a ``mode`` normalisation of x normalises over (see the module doc)."""
    n = len(x_shape)
    if mode == "batch":
        return (0,) + tuple(range(2, n))
    if mode == "instance":
        return tuple(range(2, n))
    spanned = [i for i in range(1, n) if scale_shape[i] != 1]
    if not spanned:
        raise InvalidValueError(f"{mode} norm: scale {scale_shape} spans none of x's dims {x_shape} after the first; "
                                f"give it the sizes of the normalised dims")
    return tuple(range(spanned[0], n))


def stat_shape(mode: str, x_shape: tuple[int, ...], scale_shape: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """The mean / inverse-variance shape: x's with 1 on the normalised dims (layer-like modes without the scale's
    shape: every dim but the first)."""
    if scale_shape is None:
        scale_shape = (1,) + tuple(x_shape[1:]) if mode in _LAYER_LIKE else (1,) * len(x_shape)
    axes = norm_axes(mode, x_shape, scale_shape)
    return tuple(1 if i in axes else s for i, s in enumerate(x_shape))


def param_shape(mode: str, x_shape: tuple[int, ...], scale_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The scale/bias shape a ``mode`` normalisation of x needs (per channel for batch and instance norm; the
    normalised dims for layer-like modes, and the batch dim for adaptive layer norm)."""
    n = len(x_shape)
    if mode in ("batch", "instance"):
        return (1, x_shape[1]) + (1,) * (n - 2)
    first = norm_axes(mode, x_shape, scale_shape)[0]
    lead = (x_shape[0],) if mode == "ada_layer" else (1,)
    return lead + (1,) * (first - 1) + tuple(x_shape[first:])


def _mode(mode: str) -> capi.cudnnBackendNormMode_t:
    if not isinstance(mode, str) or mode not in NORM_MODES:
        raise InvalidValueError(f"mode must be one of {', '.join(NORM_MODES)}, got {mode!r}")
    return capi.cudnnBackendNormMode_t[NORM_MODES[mode]]


class GenStats(Op):
    """Per-channel sum and sum of squares."""

    kind, backend, attrs = "genstats", "OPERATION_GEN_STATS", {"x": "xdesc", "sum": "sumdesc", "sqsum": "sqsumdesc"}

    def lower(self, ctx: LowerContext) -> None:
        self.add_to(ctx, mode=capi.CUDNN_GENSTATS_SUM_SQSUM, math_prec=self.params["compute_dtype"])


class NormForward(Op):
    """Layer, RMS, instance, batch or adaptive layer normalisation forward (training or inference phase);
    batch-norm training may also update running statistics (roles running_mean/var, momentum -> next_running_*)."""

    kind, backend, attrs = "norm_forward", "OPERATION_NORM_FORWARD", _FWD_ATTRS

    def lower(self, ctx: LowerContext) -> None:
        phase = capi.CUDNN_NORM_FWD_TRAINING if self.params["training"] else capi.CUDNN_NORM_FWD_INFERENCE
        self.add_to(ctx, mode=self.params["mode"], phase=phase)


class NormBackward(Op):
    """Normalisation backward: dx, dscale, dbias from dy, x, scale and the saved statistics."""

    kind, backend, attrs = "norm_backward", "OPERATION_NORM_BACKWARD", _BWD_ATTRS

    def lower(self, ctx: LowerContext) -> None:
        self.add_to(ctx, mode=self.params["mode"])


class BNFinalize(Op):
    """Batch-norm statistics from genstats' per-channel sums (training phase): saved mean and inverse standard
    deviation, the equivalent scale/bias, the running-average update."""

    kind, backend, attrs = "bn_finalize", "OPERATION_BN_FINALIZE_STATISTICS", _FIN_ATTRS

    def lower(self, ctx: LowerContext) -> None:
        self.add_to(ctx, stats_mode=capi.CUDNN_BN_FINALIZE_STATISTICS_TRAINING,
                    math_prec=self.params["compute_dtype"])


class BNBackwardWeights(Op):
    """Batch-norm dscale/dbias and the coefficients of dx = eq_dy_scale * dy + eq_x_scale * x + eq_bias."""

    kind, backend, attrs = "bn_backward_weights", "OPERATION_BN_BWD_WEIGHTS", _DBN_ATTRS

    def lower(self, ctx: LowerContext) -> None:
        self.add_to(ctx, math_prec=self.params["compute_dtype"])


class NormBuilders(Builder):
    """The :class:`~cudnn_py.graph.Graph` methods that add statistics and normalisations."""

    def _norm_x(self, x, what: str):
        x = self._own(x, "x")
        if x.ndim < 3:
            raise InvalidValueError(f"{what} needs x with a batch, a channel and at least one more dim, got {x.shape}")
        return x

    def _norm_param(self, mode: str, x, t, role: str, what: str, expected: tuple[int, ...] | None = None):
        """A scale/bias tensor of ``mode``'s parameter shape."""
        t = self._own(t, role)
        if t.ndim != x.ndim or any(a not in (1, b) for a, b in zip(t.shape, x.shape)):
            raise InvalidValueError(f"{what}: {role} {t.shape} does not broadcast to x {x.shape}")
        want = expected or param_shape(mode, x.shape, t.shape)
        if t.shape != want:
            raise InvalidValueError(f"{what}: {mode} norm of x {x.shape} needs {role} of shape {want}, got {t.shape}")
        return t

    def _stat(self, x, t, role: str, shape: tuple[int, ...], what: str):
        t = self._own(t, role)
        if t.shape != shape:
            raise InvalidValueError(f"{what}: {role} must have shape {shape} (x {x.shape}), got {t.shape}")
        return t

    def _positive(self, v, what: str, most: float = float("inf")) -> float:
        f = float_arg(v, what)
        if not f > 0:
            raise InvalidValueError(f"{what} must be > 0, got {v!r}")
        if f > most:
            raise InvalidValueError(f"{what} must be in (0, {most:g}], got {v!r}")
        return f

    def _stat_out(self, shape, name, suffix):
        return self.virtual(shape, name=name and f"{name}.{suffix}").set_dtype("float32")

    def genstats(self, x, *, compute_dtype=None, name: str | None = None):
        """Per-channel sum and sum of squares of x (N, C, ...). Returns two (1, C, 1, ...) virtual tensors."""
        x = self._own(x, "x")
        shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
        s, sq = (self.virtual(shape, name=name and f"{name}.{k}") for k in ("sum", "sqsum"))
        self.add_op(GenStats({"x": x}, {"sum": s, "sqsum": sq}, {"compute_dtype": self._compute(compute_dtype)},
                              name))
        return s, sq

    def norm_forward(self, x, scale, bias=None, *, mode: str = "layer", training: bool = True,
                     epsilon: float = 1e-5, mean=None, inv_variance=None, name: str | None = None):
        """Normalisation forward: ``mode`` 'layer', 'rms', 'instance', 'batch' or 'ada_layer' (adaptive layer norm:
        scale and bias per sample, shape (N, 1.., normalised dims)). ``scale``/``bias``: the mode's parameter shape (see
        the module doc); rms takes an optional bias, the others need one. ``epsilon`` > 0. Training returns ``(y, mean,
        inv_variance)`` (``mean`` None for rms; statistics float32, virtual until ``set_output``); inference takes
        ``mean`` and ``inv_variance`` (rms: only ``inv_variance``) and returns ``y``. Batch norm: see :meth:`batch_norm`
        for running statistics."""
        m = _mode(mode)
        if mode == "batch" and not training:
            raise InvalidValueError("cuDNN's norm forward has no batch-norm inference phase")
        x = self._norm_x(x, "norm_forward")
        scale = self._norm_param(mode, x, scale, "scale", "norm_forward")
        eps = self._positive(epsilon, "epsilon")
        if bias is None and mode != "rms":
            raise InvalidValueError(f"{mode} norm needs a bias tensor")
        if training and (mean is not None or inv_variance is not None):
            raise InvalidValueError("training computes mean and inv_variance: do not pass them")
        stat = stat_shape(mode, x.shape, scale.shape)
        inputs = {"x": x, "scale": scale}
        if bias is not None:
            inputs["bias"] = self._norm_param(mode, x, bias, "bias", "norm_forward", scale.shape)
        inputs["epsilon"] = self.scalar(eps, ndim=x.ndim)
        outputs = {"y": self.virtual(x.shape, strides=x.strides, like=x, name=name and f"{name}.y")}
        if training:
            if mode != "rms":
                outputs["mean"] = self._stat_out(stat, name, "mean")
            outputs["inv_variance"] = self._stat_out(stat, name, "inv_variance")
        else:
            needed = {"inv_variance": inv_variance} if mode == "rms" else {"mean": mean, "inv_variance": inv_variance}
            for k, t in needed.items():
                if t is None:
                    raise InvalidValueError(f"{mode} norm inference needs {k}= (a tensor of shape {stat})")
                inputs[k] = self._stat(x, t, k, stat, "norm_forward")
        self.add_op(NormForward(inputs, outputs, {"mode": m, "training": bool(training)}, name))
        return (outputs["y"], outputs.get("mean"), outputs["inv_variance"]) if training else outputs["y"]

    def batch_norm(self, x, scale, bias, *, epsilon: float = 1e-5, running_mean=None, running_var=None,
                   momentum: float = 0.1, name: str | None = None) -> BatchNormOutputs:
        """Batch-norm training forward over all dims but the channel (x (N, C, ...); scale, bias and statistics
        (1, C, 1, ...)). With ``running_mean`` and ``running_var`` (both or neither) the outputs include the
        updated running statistics, ``(1 - momentum) * running + momentum * batch`` with the batch variance
        unbiased (0 < momentum <= 1; bind the same arrays as input and output to update in place).
        Returns :class:`BatchNormOutputs`."""
        x = self._norm_x(x, "batch_norm")
        scale = self._norm_param("batch", x, scale, "scale", "batch_norm")
        bias = self._norm_param("batch", x, bias, "bias", "batch_norm")
        eps = self._positive(epsilon, "epsilon")
        stat = stat_shape("batch", x.shape)
        if (running_mean is None) != (running_var is None):
            raise InvalidValueError("batch_norm: give both running_mean and running_var, or neither")
        running = {}
        if running_mean is not None:
            mom = self._positive(momentum, "momentum", 1)
            running = {"running_mean": self._stat(x, running_mean, "running_mean", stat, "batch_norm"),
                       "running_var": self._stat(x, running_var, "running_var", stat, "batch_norm")}
        inputs = {"x": x, "scale": scale, "bias": bias, "epsilon": self.scalar(eps, ndim=x.ndim)}
        outputs = {"y": self.virtual(x.shape, strides=x.strides, like=x, name=name and f"{name}.y"),
                   "mean": self._stat_out(stat, name, "mean"),
                   "inv_variance": self._stat_out(stat, name, "inv_variance")}
        if running:
            inputs.update(running)
            inputs["momentum"] = self.scalar(mom, ndim=x.ndim)
            outputs.update({f"next_{k}": self._stat_out(stat, name, k) for k in ("running_mean", "running_var")})
        self.add_op(NormForward(inputs, outputs, {"mode": _mode("batch"), "training": True}, name))
        return BatchNormOutputs(outputs["y"], outputs["mean"], outputs["inv_variance"],
                                outputs.get("next_running_mean"), outputs.get("next_running_var"))

    def norm_backward(self, dy, x, scale, *, mean=None, inv_variance, mode: str = "layer", has_bias: bool = True,
                      name: str | None = None):
        """Normalisation backward (``mode`` as in :meth:`norm_forward`) from the saved statistics of the forward
        pass (``mean`` not for rms). Returns ``(dx, dscale, dbias)``: dx like x, dscale/dbias in the scale's shape
        and dtype (``dbias`` None for rms with ``has_bias=False``)."""
        m = _mode(mode)
        x = self._norm_x(x, "norm_backward")
        dy = self._own(dy, "dy")
        if dy.shape != x.shape:
            raise InvalidValueError(f"norm_backward: dy {dy.shape} and x {x.shape} must have one shape")
        scale = self._norm_param(mode, x, scale, "scale", "norm_backward")
        stat = stat_shape(mode, x.shape, scale.shape)
        inputs = {"dy": dy, "x": x, "scale": scale,
                  "inv_variance": self._stat(x, inv_variance, "inv_variance", stat, "norm_backward")}
        if mode == "rms":
            if mean is not None:
                raise InvalidValueError("rms norm has no mean: do not pass one")
        else:
            if mean is None:
                raise InvalidValueError(f"{mode} norm backward needs mean= (a tensor of shape {stat})")
            inputs["mean"] = self._stat(x, mean, "mean", stat, "norm_backward")
        if not has_bias and mode != "rms":
            raise InvalidValueError(f"has_bias=False is for rms norm; {mode} norm always has a bias")
        outputs = {"dx": self.virtual(x.shape, strides=x.strides, like=x, name=name and f"{name}.dx")}
        for k in ("dscale", "dbias") if has_bias else ("dscale",):
            t = self.virtual(scale.shape, strides=scale.strides, name=name and f"{name}.{k}")
            outputs[k] = t.set_dtype(scale.dtype)
        self.add_op(NormBackward(inputs, outputs, {"mode": m}, name))
        return outputs["dx"], outputs["dscale"], outputs.get("dbias")

    def bn_finalize(self, sum, sqsum, scale, bias, *, accum_count: int, running_mean, running_var,
                    momentum: float = 0.1, epsilon: float = 1e-5, compute_dtype=None,
                    name: str | None = None) -> BNFinalizeOutputs:
        """Batch-norm statistics from per-channel ``sum`` and ``sqsum`` (e.g. :meth:`genstats` of a convolution
        output) over ``accum_count`` elements per channel: mean, inverse standard deviation, the equivalent
        ``eq_scale = scale * inv_std``, ``eq_bias = bias - mean * eq_scale`` (y = eq_scale * x + eq_bias), and the
        running statistics updated with ``momentum`` (the batch variance unbiased, as in :meth:`batch_norm`).
        All (1, C, 1, ...). Returns :class:`BNFinalizeOutputs`."""
        s = self._own(sum, "sum")
        if s.ndim < 3 or s.shape[0] != 1 or any(d != 1 for d in s.shape[2:]):
            raise InvalidValueError(f"bn_finalize: sum must be (1, C, 1, ...), got {s.shape}")
        shape = s.shape
        ins = {"sum": s}
        for role, t in (("sqsum", sqsum), ("scale", scale), ("bias", bias)):
            ins[role] = self._stat(s, t, role, shape, "bn_finalize")
        if isinstance(accum_count, bool) or not isinstance(accum_count, int) or accum_count < 1:
            raise InvalidValueError(f"accum_count must be a positive int (elements per channel), got {accum_count!r}")
        eps = self._positive(epsilon, "epsilon")
        if running_mean is None or running_var is None:
            raise InvalidValueError("bn_finalize needs running_mean= and running_var= (cuDNN does not finalize the "
                                    "operation without the running-average update)")
        mom = self._positive(momentum, "momentum", 1)
        running = {"running_mean": self._stat(s, running_mean, "running_mean", shape, "bn_finalize"),
                   "running_var": self._stat(s, running_var, "running_var", shape, "bn_finalize")}
        # every check is done: make the tensors (in the order their uids always had: the plan-store keys)
        ins["epsilon"] = self.scalar(eps, ndim=s.ndim)
        ins["accum_count"] = self.scalar(accum_count, dtype="int64", ndim=s.ndim)
        outs = {k: self._stat_out(shape, name, k) for k in ("eq_scale", "eq_bias", "mean", "inv_std")}
        ins.update(running)
        ins["momentum"] = self.scalar(mom, ndim=s.ndim)
        outs.update({f"next_{k}": self._stat_out(shape, name, k) for k in ("running_mean", "running_var")})
        self.add_op(BNFinalize(ins, outs, {"compute_dtype": self._compute(compute_dtype)}, name))
        return BNFinalizeOutputs(*outs.values())

    def bn_backward_weights(self, dy, x, mean, inv_std, scale, *, compute_dtype=None,
                            name: str | None = None) -> BNBackwardWeightsOutputs:
        """Batch-norm weight gradients and dx coefficients (the dBN op of cuDNN's fused BN backward): dscale,
        dbias and eq_dy_scale, eq_x_scale, eq_bias with dx = eq_dy_scale * dy + eq_x_scale * x + eq_bias, all
        (1, C, 1, ...) float32. Returns :class:`BNBackwardWeightsOutputs`."""
        x = self._norm_x(x, "bn_backward_weights")
        dy = self._own(dy, "dy")
        if dy.shape != x.shape:
            raise InvalidValueError(f"bn_backward_weights: dy {dy.shape} and x {x.shape} must have one shape")
        stat = stat_shape("batch", x.shape)
        ins = {"x": x, "dy": dy}
        for role, t in (("mean", mean), ("inv_std", inv_std), ("scale", scale)):
            ins[role] = self._stat(x, t, role, stat, "bn_backward_weights")
        outs = {k: self._stat_out(stat, name, k) for k in ("dscale", "dbias", "eq_dy_scale", "eq_x_scale", "eq_bias")}
        self.add_op(BNBackwardWeights(ins, outs, {"compute_dtype": self._compute(compute_dtype)}, name))
        return BNBackwardWeightsOutputs(*outs.values())
