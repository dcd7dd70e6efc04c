"""The options of scaled dot-product attention: one frozen, hashable :class:`SdpaOptions`, checked once, which every
attention entry point and ``Graph.sdpa*`` take (or its fields as keywords). An attention call's tensors are
arguments beside it, not options.
"""
from __future__ import annotations

import dataclasses
import difflib
import inspect
from collections.abc import Iterable
from typing import Any

import numpy as np

from cudnn_py._deprecation import renamed_kwargs
from cudnn_py.core.args import bool_arg, float_arg, int_arg
from cudnn_py.errors import InvalidTypeError, InvalidValueError

__all__ = ["SdpaOptions", "ALIGNMENTS", "IMPLEMENTATIONS", "SPELLINGS", "fp8_only", "unexpected_keyword", "renamed"]

#: diagonal alignments of the causal / sliding-window bands
ALIGNMENTS = ("top_left", "bottom_right")
#: ``implementation=`` values: 'composite' (the pattern of primitive operations), 'unified' (``OPERATION_SDPA_FWD``:
#: scale, grouped-query heads and the statistics only), 'auto' (unified where it can, as cudnn-frontend does)
IMPLEMENTATIONS = ("auto", "composite", "unified")


#: torch's, cudnn-frontend's and flash-attention's keyword -> what to write here (the did-you-mean hints)
SPELLINGS = {
    "dropout_p": "dropout=", "is_causal": "causal=", "attn_scale": "scale=", "softmax_scale": "scale=",
    "use_causal_mask": "causal=", "use_causal_mask_bottom_right": "causal=True, diagonal_alignment='bottom_right'",
    "sliding_window_length": "left_bound=", "diagonal_band_left_bound": "left_bound=",
    "diagonal_band_right_bound": "right_bound=", "use_alibi_mask": "alibi=", "attn_mask": "bias=",
    "generate_stats": "return_stats=", "is_inference": "return_stats=", "use_padding_mask": "seq_len_q=",
    "seq_lengths_q": "seq_len_q=", "seq_lengths_kv": "seq_len_kv=", "max_seqlen_q": "max_seq_len_q=",
    "max_seqlen_k": "max_seq_len_kv=", "max_seqlen_kv": "max_seq_len_kv=", "cu_seqlens_k": "cu_seqlens_kv=",
    "paged_attention_k_table": "page_table_k=", "paged_attention_v_table": "page_table_v=",
    "paged_attention_max_seq_len_kv": "max_seq_len_kv=", "ragged_offset_kv": "ragged_offset_k=",
}


def unexpected_keyword(where: str, name: str, accepted: Iterable[str]) -> InvalidTypeError:
    """The error for keyword ``name`` that ``where`` does not take, with a did-you-mean from :data:`SPELLINGS` or
    the closest of ``accepted``."""
    accepted = list(accepted)
    hint = SPELLINGS.get(name)
    if hint is None or hint.partition("=")[0] not in accepted:
        close = difflib.get_close_matches(name, accepted, 1)
        hint = f"{close[0]}=" if close else None
    return InvalidTypeError(f"{where}() got an unexpected keyword argument {name!r}"
                            + (f"; did you mean {hint}?" if hint else ""))


def renamed(where: str, old: dict[str, Any], renames: dict[str, str], accepted: Iterable[str],
            values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with the deprecated spellings in ``old`` (``renames``: old -> new) moved to their new names, a
    warning each; any other keyword of ``old`` refused with :func:`unexpected_keyword`."""
    for name in old:
        if name not in renames:
            raise unexpected_keyword(where, name, accepted)
    return renamed_kwargs(where, old, renames, values, stacklevel=5)


def _opt(check, value: Any, name: str, *bounds: Any) -> Any:
    return None if value is None else check(value, name, *bounds)


def _choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise (InvalidValueError if isinstance(value, str) else InvalidTypeError)(
            f"{name} must be one of {choices}, got {value!r}")
    return value


def _alibi(value: Any) -> bool | tuple[float, ...]:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    try:
        slopes = np.asarray(value, np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise InvalidTypeError(f"alibi must be True, False or per-head slopes, got {value!r}") from None
    if not slopes.size or not np.isfinite(slopes).all():
        raise InvalidValueError(f"alibi slopes must be finite numbers, one per query head, got {value!r}")
    return tuple(float(x) for x in slopes)


@dataclasses.dataclass(frozen=True)
class SdpaOptions:
    """How attention is computed; checked when made, hashable (the plan caches key on it).

    :param scale: multiplies q k^T (default 1/sqrt(D)).
    :param causal: query i attends to keys <= i (relative to the aligned diagonal); means ``right_bound=0``.
    :param diagonal_alignment: 'top_left' or 'bottom_right' (the diagonal ends at the last key; needs causal or
        a bound).
    :param left_bound, right_bound: sliding window: keys in (i - left_bound, i + right_bound].
    :param alibi: True for the standard ALiBi slopes, or one slope per query head (needs causal). The graph
        builder takes the slopes as a tensor instead (``Graph.sdpa(..., alibi=tensor)``).
    :param dropout: drop probability of the attention weights, in [0, 1) (needs a seed and an offset).
    :param max_seq_len_q, max_seq_len_kv: the longest sequences of a packed (ragged) batch; ``max_seq_len_kv``
        also the longest cached sequence of a paged KV cache.
    :param implementation: 'auto', 'composite' or 'unified' (see :data:`IMPLEMENTATIONS`).
    """

    scale: float | None = None
    causal: bool = False
    diagonal_alignment: str = "top_left"
    left_bound: int | None = None
    right_bound: int | None = None
    alibi: bool | tuple[float, ...] = False
    dropout: float = 0.0
    max_seq_len_q: int | None = None
    max_seq_len_kv: int | None = None
    implementation: str = "auto"

    def __new__(cls, *args: Any, **kwargs: Any) -> "SdpaOptions":
        # before the generated __init__: unknown, extra or repeated fields get this package's errors
        names = list(_DEFAULTS)
        if len(args) > len(names):
            raise InvalidTypeError(f"SdpaOptions() takes {len(names)} fields ({', '.join(names)}), got {len(args)} "
                                   f"positional arguments")
        for name in kwargs:
            if name not in _DEFAULTS:
                raise unexpected_keyword("SdpaOptions", name, names)
            if name in names[:len(args)]:
                raise InvalidTypeError(f"SdpaOptions() got {name} both positionally and as {name}=")
        return super().__new__(cls)

    def __post_init__(self) -> None:
        fix = {"scale": _opt(float_arg, self.scale, "scale"), "causal": bool_arg(self.causal, "causal"),
               "diagonal_alignment": _choice(self.diagonal_alignment, "diagonal_alignment", ALIGNMENTS),
               "left_bound": _opt(int_arg, self.left_bound, "left_bound", 1),
               "right_bound": _opt(int_arg, self.right_bound, "right_bound", 0), "alibi": _alibi(self.alibi),
               "dropout": float_arg(self.dropout, "dropout", 0.0),
               "max_seq_len_q": _opt(int_arg, self.max_seq_len_q, "max_seq_len_q", 1),
               "max_seq_len_kv": _opt(int_arg, self.max_seq_len_kv, "max_seq_len_kv", 1),
               "implementation": _choice(self.implementation, "implementation", IMPLEMENTATIONS)}
        for name, value in fix.items():
            object.__setattr__(self, name, value)
        if self.dropout >= 1.0:
            raise InvalidValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.causal and self.right_bound not in (None, 0):
            raise InvalidValueError(f"causal=True means right_bound=0; got right_bound={self.right_bound}")
        if self.diagonal_alignment == "bottom_right":
            if self.left_bound is None and self.band_right is None:
                raise InvalidValueError("diagonal_alignment='bottom_right' needs causal=True, right_bound or "
                                        "left_bound")
            if self.alibi is not False or self.dropout:
                raise InvalidValueError("bottom-right alignment does not combine with ALiBi or dropout in cuDNN's "
                                        "attention engines")
        if self.alibi is not False and self.band_right != 0:
            raise InvalidValueError("ALiBi needs causal=True (right_bound=0), as in cuDNN")

    @property
    def band_right(self) -> int | None:
        """The right bound of the band (0 under ``causal``), None without one."""
        return 0 if self.causal else self.right_bound

    @classmethod
    def of(cls, options: "SdpaOptions | dict | None", keywords: dict[str, Any] | None = None,
           where: str = "sdpa") -> "SdpaOptions":
        """``options`` (an SdpaOptions, a dict of its fields, or None) or, without it, the option ``keywords`` of a
        call; both together only where every keyword has its default (else :class:`InvalidTypeError`)."""
        keywords = keywords or {}
        unknown = sorted(set(keywords) - set(_DEFAULTS))
        if unknown:
            raise unexpected_keyword(where, unknown[0], _DEFAULTS)
        if options is None:
            return cls(**keywords)
        if isinstance(options, dict):
            odd = [k for k in options if not isinstance(k, str)]
            if odd:
                raise InvalidTypeError(f"{where}: options' keys are field names (str), got {odd[0]!r}")
            options = cls.of(None, options, where)
        if not isinstance(options, cls):
            raise InvalidTypeError(f"{where}: options must be an SdpaOptions (or a dict of its fields), got "
                                   f"{type(options).__name__}")
        given = [n for n, v in keywords.items() if not (type(v) is type(_DEFAULTS[n]) and v == _DEFAULTS[n])]
        if given:
            raise InvalidTypeError(f"{where}: pass {', '.join(given)} in options= or as keywords, not both")
        return options


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(SdpaOptions)}
# what introspection (help(), IDEs, the API docs) shows: the fields, not __new__'s catch-all
_init = inspect.signature(SdpaOptions.__init__)
setattr(SdpaOptions, "__signature__", _init.replace(parameters=list(_init.parameters.values())[1:]))


def fp8_only(what: str, opts: SdpaOptions) -> SdpaOptions:
    """``opts``, refused unless every option but scale and causal (what FP8 attention takes) has its default."""
    other = [n for n, v in _DEFAULTS.items() if n not in ("scale", "causal") and getattr(opts, n) != v]
    if other:
        raise InvalidValueError(f"{what}: FP8 attention takes the options scale and causal only, not {other[0]}")
    return opts
