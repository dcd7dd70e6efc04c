"""Where a prepared call's host time goes: relu, conv, sdpa and batch-norm training, per path (DeviceArrays and torch
tensors, output given and allocated), the package's time per call beside the bare C call, and its breakdown.

    python benchmarks/host_profile.py [--calls 2000] [--rounds 5] [--only NAME]

Tiny float16 tensors, so every call is host-bound; every figure is the median of ``--rounds`` rounds of ``--calls``
calls (warm, microseconds per call, the stream synchronised after each round). One call of each path is caught in
its prepared call (:mod:`cudnn_py.calls.prepared`): its key, arguments and addresses, so that each section runs alone:

* ``package``: the public call; ``bare C``: the recorded steps alone (the legacy C call with its descriptors and
  scaling factors, or ``cudnnBackendExecute`` with a variant pack made once), at the call's addresses;
* ``wrapper``: ``package`` less the prepared call's ``fast``: the handle's checks and the lookup of the function's
  last prepared call (a repeat call of one signature finds it there, and builds no key);
* ``guard``: ``fast`` less ``replay``: reading the arguments and comparing them with the prepared call's signature;
* ``replay``: the prepared call's generated work: ``alloc`` (each allocation of new outputs and its free, ``n`` of
  them), ``bare C``, and ``rest`` (overlap checks, workspace fetch, the graph route's variant-pack lookup, the result
  put together);
* ``key``: what a call of another signature than the function's last pays instead of ``guard``: the arguments read
  into the key, hashed and looked up.

Last, per array: what reading its key parts and making one new output cost (DeviceArray, torch tensor).

``batchnorm training`` gives ``y`` and the running statistics (as ``benchmarks/host_overhead.py`` does): its saved
mean and inverse variance are still new outputs on every call; ``... saved given`` gives them too.
``--smoke`` also runs relu and batch norm with stand-ins (a handle never created in cuDNN, C calls and allocations
stubbed), so that CI runs this breakdown's machinery on a CPU.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import types
from collections.abc import Callable

import numpy as np

import cudnn_py as cudnn
from cudnn_py import capi
from cudnn_py.core import memory
from cudnn_py.calls import prepared as prep
from cudnn_py.cli.prerequisites import script_args

import host_overhead  # this folder's: the bare steps and the per-call timer

X, W, Q, P = (1, 8, 8, 8), (8, 8, 3, 3), (1, 2, 64, 64), (1, 8, 1, 1)


class Caught:
    """Stands in for one prepared call in the handle's cache and catches the next replay's arguments."""

    fast = None  # what the cache's front keeps of it

    def __init__(self, p: prep.Prepared):
        self.p, self.got = p, None

    def run(self, handle, args, kwargs, ptrs):
        self.got = (handle, args, kwargs, list(ptrs))
        return self.p.run(handle, args, kwargs, ptrs)


def catch(h, call: Callable[[], object]) -> tuple:
    """(key, prepared call, (handle, args, kwargs, ptrs)) of ``call``'s replay (it has run once before)."""
    cache = h.cache[prep.CACHE]
    before = dict(cache)
    for key, p in before.items():
        cache[key] = Caught(p)
    cache.front.clear()  # so that the call builds its key
    try:
        call()
    finally:
        hit = [(key, c) for key, c in cache.items() if isinstance(c, Caught) and c.got is not None]
        for key, p in before.items():
            cache[key] = p
        cache.front.clear()
    if len(hit) != 1:
        raise LookupError(f"its repeat call replayed {len(hit)} prepared calls (validated every time?)")
    key, c = hit[0]
    return key, c.p, c.got


def bare_steps(h, p: prep.Prepared, ptrs: list, keep: list) -> Callable[[], None]:
    """``p``'s steps alone at the call's addresses (new outputs made once, kept in ``keep``)."""
    addrs, bases = list(ptrs), [b.on(h.stream, h.device) for b in p.bases]  # what new outputs view
    keep += bases
    for new in p.news:
        a = new[2](bases[new[0]].ptr + new[1], None, h.stream) if type(new) is tuple else \
            new.on(h.stream, h.device) if type(new) is memory.Output else new(h)[0]  # a package allocator's
        keep.append(a)
        addrs.append(a.ptr if type(a) is memory.DeviceArray else a.data_ptr())
    return host_overhead.bare_steps(h, p, addrs.__getitem__)


def profile(h, call: Callable[[], object], calls: int, rounds: int, sync) -> dict[str, float]:
    """The sections of one path's call (module doc), in microseconds per call."""
    call()
    call()
    key, p, (hh, args, kwargs, ptrs) = catch(h, call)
    keep: list = []
    # the allocations: the blocks new outputs view, each other new output (an Output's, or its package allocator's)
    made = [*(b.take for b in p.bases), *((lambda o=new: o.on(hh.stream, hh.device)) if type(new) is memory.Output
                                          else (lambda new=new: new(hh)) for new in p.news if type(new) is not tuple)]
    allocs = {f"alloc{i}": new for i, new in enumerate(made)}
    us = host_overhead.per_call({"package": call, "fast": lambda: p.fast(hh, args, kwargs),
                                 "replay": lambda: p.run(hh, args, kwargs, ptrs), "key": keyed(h, key, call),
                                 "bare": bare_steps(hh, p, ptrs, keep), **allocs}, calls, rounds, sync)
    alloc = sum(us.pop(k) for k in allocs)
    wrapper = us["package"] - us["fast"]
    return {**us, "alloc": alloc, "n": len(made), "wrapper": wrapper, "guard": us["fast"] - us["replay"],
            "rest": us["replay"] - alloc - us["bare"], "key": us["key"] - wrapper - us["replay"],
            "added": us["package"] - us["bare"]}


def keyed(h, key: tuple, call: Callable[[], object]) -> Callable[[], object]:
    """``call`` made as a call of another signature than its function's last: the cache's front emptied first (its
    cost counted in)."""
    front = h.cache[prep.CACHE].front
    return lambda: (front.clear(), call())


def rows(h, **opts) -> dict[str, tuple[Callable, Callable | None]]:
    """name -> (call site (arrays, given output or None: :func:`host_overhead.site`), the output to give (arrays) or
    None); ``opts``: more options of relu and batch norm (the stand-ins' engine)."""
    conv = cudnn.Convolution(padding=1)
    bn = dict(factor=0.1, **opts)
    site = host_overhead.site
    return {
        "relu": (lambda a, o: site(cudnn.activation_forward, h, "relu", a["x"], y=o, **opts), lambda a: a.like("x")),
        "conv 3x3": (lambda a, o: site(cudnn.convolution_forward, h, conv, a["x"], a["w"], y=o),
                     lambda a: a.like("x")),
        "sdpa": (lambda a, o: site(cudnn.sdpa, h, a["q"], a["q"], a["q"], o=o), lambda a: a.like("q")),
        "batchnorm training": (lambda a, o: site(
            cudnn.batchnorm_forward_training, h, a["x"], a["scale"], a["bias"], running_mean=a["rm"],
            running_var=a["rv"], y=o, **bn), lambda a: a.like("x")),
        "batchnorm training saved given": (lambda a, o: site(
            cudnn.batchnorm_forward_training, h, a["x"], a["scale"], a["bias"], running_mean=a["rm"],
            running_var=a["rv"], saved_mean=a["sm"], saved_inv_var=a["siv"], y=o, **bn), lambda a: a.like("x")),
    }


class Arrays(dict):
    """The rows' inputs in one package ("dev": DeviceArrays, "torch": torch tensors)."""

    def __init__(self, kind: str, new: Callable[[np.ndarray], object], like: Callable[[object], object]):
        rng = np.random.default_rng(0)
        super().__init__()
        self.kind, self._like = kind, like
        for n, shape in (("x", X), ("w", W), ("q", Q)):
            self[n] = new(rng.standard_normal(shape).astype(np.float16))
        for n in ("scale", "bias", "rm", "sm", "siv"):
            self[n] = new(rng.standard_normal(P).astype(np.float32))
        self["rv"] = new(np.abs(rng.standard_normal(P)).astype(np.float32) + 0.5)

    def like(self, n: str):
        return self._like(self[n])


def table(h, kinds: dict[str, Arrays], names: dict, calls: int, rounds: int, sync) -> list[str]:
    cols = ("bare", "package", "added", "wrapper", "guard", "replay", "alloc", "rest", "key")
    lines = [f"{'operation':31s} {'path':10s} " + " ".join(f"{c:>7s}" for c in cols) + "  n"]
    for name, (call, given) in names.items():
        for kind, a in kinds.items():
            for how, o in (("given", given(a) if given else None), ("new", None)):
                try:
                    us = profile(h, call(a, o), calls, rounds, sync)
                except (cudnn.CudnnPyError, LookupError) as e:  # refused here, or not prepared: said, the table goes on
                    lines.append(f"{name:31s} {kind + ' ' + how:10s} refused: {type(e).__name__}: {str(e)[:60]}")
                    continue
                lines.append(f"{name:31s} {kind + ' ' + how:10s} " + " ".join(f"{us[c]:7.2f}" for c in cols)
                             + f"  {us['n']}")
    return lines


# ---------------------------------------------------------------- stand-ins (--smoke on a CPU)

class _CFunction:
    """A capi function that queues nothing (what a recording takes of one: ``raw``, ``pointer_params``)."""
    __name__ = "stand-in"

    def __init__(self, real):
        self.raw, self.pointer_params = self, real.pointer_params

    def __call__(self, *args):
        return 0


class _Buffer:
    """A cuda.core buffer stand-in at a made-up address (64-byte aligned)."""
    made = 1 << 40

    def __init__(self, size: int):
        _Buffer.made += 1 << 20
        self.handle = _Buffer.made

    def close(self) -> None:
        pass


@contextlib.contextmanager
def _stand_ins():
    """A Handle never created in cuDNN, the legacy C calls of relu and batch norm stubbed, the only device and its
    default stream stand-ins (so that new arrays take the real allocator's kept blocks of made-up buffers, dropped
    after)."""
    from cudnn_py.core import blocks, contexts
    from cudnn_py.core.handle import Handle
    dev = types.SimpleNamespace(device_id=0, allocate=lambda size, stream=None: _Buffer(size))
    stream = types.SimpleNamespace(handle=0)  # the legacy default stream's

    class Workspace:
        def get(self, nbytes, stream=None):
            return 1 << 39 if nbytes else 0

    names = ("cudnnActivationForward", "cudnnBatchNormalizationForwardTraining")
    saved = {n: getattr(capi, n) for n in names}
    saved_device = memory.get_device, memory.as_stream, contexts._DEVICE_COUNT[:], dict(blocks._kept)
    h = Handle.__new__(Handle)
    h._ptr, h.cache, h.workspace, h._stream, h._stream_ptr, h.device = capi.cudnnHandle_t(1), {}, Workspace(), stream, 0, 0
    try:
        for n in names:
            setattr(capi, n, _CFunction(saved[n]))
        memory.get_device, memory.as_stream = (lambda device=None: dev), (lambda s=None, device=None: stream)
        contexts._DEVICE_COUNT[:] = [1]
        yield h
    finally:
        for n in names:
            setattr(capi, n, saved[n])
        memory.get_device, memory.as_stream, contexts._DEVICE_COUNT[:], kept = saved_device
        blocks._kept.clear()  # the stand-in buffers kept go
        blocks._kept.update(kept)


def smoke() -> None:
    """The breakdown of relu and batch-norm training on DeviceArrays with stand-ins, checked, not printed."""
    with _stand_ins() as h:
        host = Arrays("dev", lambda a: memory.empty(a.shape, a.dtype), lambda a: memory.empty(a.shape, a.dtype))
        names = {k: v for k, v in rows(h, engine="legacy").items() if k.startswith(("relu", "batchnorm"))}
        got = table(h, {"dev": host}, names, 20, 1, lambda: None)
        floor = floors(h, {"dev": host}, 20, 1, lambda: None)
    if len(got) != 7 or any("refused" in line for line in got) or "DeviceArray new" not in floor:
        raise SystemExit("host_profile.py: smoke: the stand-in breakdown failed:\n" + "\n".join(got))


def floors(h, kinds: dict[str, Arrays], calls: int, rounds: int, sync) -> str:
    """Per array, what any prepared call pays: reading its key parts (the wrapper's reads, as
    :mod:`cudnn_py.calls.prepared` makes them), for a torch tensor also what the guard reads of a contiguous one
    (``is_contiguous()`` for its strides), and making one new (1, 8, 8, 8) float16 output and dropping it."""
    fns: dict[str, Callable[[], object]] = {}
    x = kinds["dev"]["x"]
    fns["DeviceArray key"] = lambda: (x.layout_key or memory.layout_key(x), x.ptr & 15)
    new_array = prep._device_allocator(x)
    fns["DeviceArray new"] = lambda: new_array.on(h.stream, h.device)
    if "torch" in kinds:
        from cudnn_py import torch_outputs
        t = kinds["torch"]["x"]
        fns["torch key"] = lambda: (type(t), t.shape, t.stride(), t.dtype, t.get_device(), t.data_ptr() & 15)
        fns["torch guard"] = lambda: (type(t), t.shape, t.is_contiguous(), t.dtype, t.get_device(), t.data_ptr())
        new = torch_outputs.allocator(X, memory.c_strides(X), np.dtype(np.float16), 0)
        fns["torch new"] = lambda: new(h)
    us = host_overhead.per_call(fns, calls, rounds, sync)
    return "per array, us: " + ", ".join(f"{k} {v:.2f}" for k, v in us.items())


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="host_profile.py", description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default=None, help="rows whose name contains this")
    if "--smoke" in (sys.argv[1:] if argv is None else argv):
        smoke()
    args = script_args(parser, argv)
    try:
        import torch
    except ImportError:  # the torch paths are left out
        torch = None
    h = cudnn.Handle()
    kinds = {"dev": Arrays("dev", cudnn.to_device, lambda a: cudnn.empty(a.shape, a.dtype))}
    if torch is not None:
        kinds["torch"] = Arrays("torch", lambda a: torch.from_numpy(a).cuda(), torch.empty_like)
    sync = torch.cuda.synchronize if torch is not None else h.synchronize
    names = {k: v for k, v in rows(h).items() if not args.only or args.only in k}
    lines = table(h, kinds, names, args.calls, args.rounds, sync)
    print(f"host time per call, us (median of {args.rounds} rounds of {args.calls}); added = package - bare; "
          f"package = wrapper + guard + replay; replay = alloc (n new outputs) + bare + rest; key: a call of "
          f"another signature's instead of guard")
    print("\n".join(lines))
    print(floors(h, kinds, args.calls, args.rounds, sync))


if __name__ == "__main__":
    main()
