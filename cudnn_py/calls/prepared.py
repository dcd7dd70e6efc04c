"""One prepared call per operation signature: what every operation function's repeat calls run (docs/prepared.md).

A function decorated with :func:`prepared` is called through a wrapper that first runs the guard of the prepared call
the function ran last on the handle (the arguments compared with the signature it was made for); failing that, it
reads its arrays' signatures (a DeviceArray's :class:`~cudnn_py.core.memory.LayoutKey`, a torch tensor's shape,
strides, dtype and device; the address alignment: attribute reads, no DLPack), which arrays share an address and its
other arguments with their types into a key, looked up in the handle's cache ``"prepared"``:

* **a hit** queues the recorded work again with this call's addresses and new outputs from the inputs' package,
  validating nothing again: the key fixes everything the validated path checked;
* **a miss** refuses broadcast arrays and overlapping outputs, then runs the function itself while
  :mod:`cudnn_py.clib.recording` writes down what it queued; a recording whose every address is one of the call's
  arrays (or a new output it returned) becomes the signature's :class:`Prepared` call, one that cannot be replayed
  is validated again next time. Meanwhile the call is :data:`cudnn_py.clib.recording.state` ``.call``, from whose
  declaration :mod:`cudnn_py.calls.engine_choice` takes its key and what a measured run mutates.

Outputs follow the inputs' package: torch tensors in, torch tensors out (torch's caching allocator on a hit,
DLPack on the first call); DeviceArrays in, DeviceArrays out; another producer's through its ``from_dlpack``. With
mixed inputs torch wins, then the first input that is not a DeviceArray.

Over 700 lines, as one module: the wrapper, the key, the generated replay and its guard must read a signature in the
same terms, and they share this module's private helpers.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import itertools
import linecache
import re
import sys
import textwrap
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np

from cudnn_py.calls import engine_choice
from cudnn_py.core import foreign, memory
from cudnn_py.clib import recording
from cudnn_py.clib.recording import state
from cudnn_py.core.caches import Cache, handle_cache
from cudnn_py.core.descriptors import Descriptor
from cudnn_py._deprecation import warn
from cudnn_py.core.args import scaling
from cudnn_py.errors import CudnnPyError, InvalidTypeError, InvalidValueError, WorkspaceLimitError
from cudnn_py.core.handle import Handle, handle_arg
from cudnn_py.core.memory import DeviceArray, Output, layout_key
from cudnn_py.core.strided import check_layout, extent, sharing

__all__ = ["prepared", "Prepared", "CACHE", "package", "to_package", "forget"]

#: the handle's cache of prepared calls (``handle.cache_info()['prepared']``)
CACHE = "prepared"

F = TypeVar("F", bound=Callable[..., Any])

#: the annotations (any of these names in it) that make a parameter an array, which a declaration must name
_ARRAY_TYPES = frozenset({"DeviceArrayLike", "DeviceArray", "Out", "Tensor"})
_PLAIN = frozenset({str, float, type(None)})  # argument types keyed by value alone (others by (type, value))
_NUMBERS = frozenset({int, float, bool})
#: what a prepared call's guard, and :func:`replay`, answer where a call is not of its signature (nothing ran)
MISS = object()
_NONE = Cache(CACHE)  # a handle's prepared calls before its first (never filled)
#: every handle's cache of prepared calls, by id (for forget(None, ...))
_CACHES: weakref.WeakValueDictionary[int, Cache] = weakref.WeakValueDictionary()
_SOURCE = itertools.count()  # numbers the generated functions' file names (their source is in linecache)


class _Unkeyable(Exception):
    """An argument the fast key cannot describe (a foreign array, an unhashable option): the call is validated."""


def moved_outputs(where: str, old: tuple, names: tuple[str, ...], given: tuple, stacklevel: int = 4) -> tuple:
    """The outputs of a call whose outputs are keyword-only, with those still passed positionally (deprecated: a
    :class:`DeprecationWarning`) put in place: ``old`` holds the extra positional arguments, ``names`` the outputs in
    their old order, ``given`` their keyword values."""
    if len(old) > len(names):
        raise InvalidTypeError(f"{where}() takes {len(names)} output(s) ({', '.join(names) or 'none'}) after its "
                               f"inputs; got {len(old)} more positional arguments")
    out = list(given)
    for i, value in enumerate(old):
        if out[i] is not None:
            raise InvalidTypeError(f"{where}() got {names[i]} both positionally and as {names[i]}=")
        out[i] = value
    warn(f"{where}(): passing outputs positionally is deprecated; pass "
         f"{', '.join(n + '=' for n in names[:len(old)])} as keywords", stacklevel=stacklevel)
    return tuple(out)


# ---------------------------------------------------------------- the caller's package

def package(values: Sequence[Any]) -> Any:
    """The package new outputs belong to for these input arrays: ``"torch"`` where any is a torch tensor, None
    (DeviceArrays) where all are DeviceArrays or None, else the module of the first other array (its
    ``from_dlpack`` makes the outputs)."""
    foreign = None
    for v in values:
        if v is None or type(v) is DeviceArray or type(v) in _NUMBERS:
            continue
        if memory.is_torch_tensor(v):
            return "torch"
        if foreign is None:
            foreign = sys.modules.get(type(v).__module__.partition(".")[0])
    return foreign


#: the module that makes new outputs of a package, by the package's top-level name: its ``allocator(shape, strides,
#: dtype, device)`` answers ``new(handle) -> (array, address)`` for a prepared call, its ``convert(a)`` gives a new
#: DeviceArray to the package without a copy. Imported on that package's first output: the core imports no array
#: package itself (torch's lives in the integrations layer, :mod:`cudnn_py.torch_outputs`)
OUTPUT_HOOKS: dict[str, str] = {"torch": "cudnn_py.torch_outputs"}


def _hooks(pkg: str) -> Any:
    return importlib.import_module(OUTPUT_HOOKS[pkg])


def to_package(a: Any, pkg: Any) -> Any:
    """A new output array ``a`` (a DeviceArray) as an array of ``pkg`` (:func:`package`), without a copy."""
    if pkg is None or type(a) is not DeviceArray:
        return a
    if type(pkg) is str:
        return _hooks(pkg).convert(a)
    convert = getattr(pkg, "from_dlpack", None)
    return a if convert is None else convert(a)


def _device_allocator(a: DeviceArray) -> Output:
    """What makes a new DeviceArray of ``a``'s layout on a handle's stream (its blocks taken in a prepared call)."""
    return Output(a.shape, a.dtype, a.strides)


# ---------------------------------------------------------------- the prepared call

class Prepared:
    """What a repeat call of one signature runs, compiled once into ``run(handle, args, kwargs, ptrs)``: the recorded
    steps with the address slots filled in (the call's arrays, then its new outputs from their package's allocator)
    and the result put together; it answers :data:`MISS` where a given output now overlaps an input or output, or a
    descriptor a caller may close (``closable``) was closed (the validated path then raises as it does).

    With a ``guard`` (:func:`_guard`: the lines reading a call's arguments that answer :data:`MISS` unless they have
    this signature, and the tests of their addresses, run with the overlap checks), also into ``fast(handle, args,
    kwargs)``: the guard, then the same work. The handle's cache keeps the last one each function ran in its
    ``front``, tried before any key is built."""

    __slots__ = ("name", "steps", "news", "bases", "uses", "workspace", "run", "fast", "source")

    def __init__(self, name: str, steps: list[tuple], news: list, overlaps: list[tuple], result: tuple,
                 shape: Any, n_slots: int, uses: frozenset[str] = frozenset(), workspace: int = 0,
                 closable: Sequence[Descriptor] = (), bases: Sequence[Any] = (),
                 guard: tuple[list[str], list[str], dict[str, Any]] | None = None):
        self.name, self.steps, self.news, self.uses, self.workspace = name, steps, news, uses, workspace
        self.bases = bases
        env: dict[str, Any] = {"MISS": MISS, "shape": shape, "new_tuple": tuple.__new__}
        # output o and array i overlap where ilo - ohi < po - pi < ihi - olo (but at a checked d)
        tests = [f"{ilo - ohi} < p{o} - p{i} < {ihi - olo}" if d is None else
                 f"({ilo - ohi} < p{o} - p{i} < {ihi - olo} and p{o} - p{i} != {d})"
                 for o, i, olo, ohi, ilo, ihi, d in overlaps]
        if len(overlaps) >= 4:  # the addresses of the last call that passed, compared first: one list comparison
            env["passed"] = [None]
        lines = []  # after the addresses p0, p1, ... are known
        for k, d in enumerate(closable):
            env[f"d{k}"] = d
            lines.append(f"    if d{k}.closed:\n        return MISS")
        if workspace:  # every step's workspace fetched (grown, or refused) before the first step queues anything
            lines.append(f"    ws = handle.workspace.get({workspace}, handle.stream)")
        # each allocation (the ones new outputs view, then each other new output's) as b{j} at address q{j}: an
        # Output's block, taken inline on the handle's stream, or a package allocator's (array, address)
        takes = [*bases, *(new for new in news if type(new) is not tuple)]
        if bases or Output in map(type, takes):
            lines.append("    s = handle.stream")
        for j, t in enumerate(takes):
            env[f"o{j}"] = t
            lines.append(f"    if o{j}.stream is not s:\n        o{j}.bind(s, handle.device)\n    b{j} = o{j}.take()\n"
                         f"    q{j} = b{j}.ptr" if type(t) is Output else f"    b{j}, q{j} = o{j}(handle)")
        own = iter(range(len(bases), len(takes)))  # the allocation index of each new output not a view
        for k, new in enumerate(news):
            if type(new) is tuple:  # (allocation j, byte offset, array maker): a view of allocation j
                j, offset, make = new
                env[f"make{k}"] = make
                lines.append(f"    p{n_slots + k} = q{j}{f' + {offset}' if offset else ''}\n"
                             f"    n{k} = make{k}(p{n_slots + k}, b{j}, s)")
            else:
                j = next(own)
                lines.append(f"    p{n_slots + k} = q{j}\n    n{k} = " +
                             (f"o{j}.make(q{j}, b{j}, s)" if type(new) is Output else f"b{j}"))
        for j, (call, base, slots, workspaces, keep) in enumerate(steps):
            env[f"call{j}"], env[f"keep{j}"] = call, keep
            args = []
            for pos, value in enumerate(base):
                env[f"k{j}_{pos}"] = value
                args.append(f"k{j}_{pos}")
            for pos, slot in slots:
                args[pos] = f"p{slot}"
            for pos, offset in workspaces:
                args[pos] = f"ws + {offset}" if offset else "ws"
            lines.append(f"    call{j}({', '.join(args)})")
        items = [f"kwargs[{where!r}]" if kind == "kw" else f"args[{where}]" if kind == "arg" else f"n{where}"
                 if kind == "new" else "None" for kind, where in result]
        made = f"({', '.join(items)},)"
        lines.append(f"    return {items[0]}" if shape is None else f"    return {made}" if shape is tuple else
                     f"    return new_tuple(shape, {made})")  # a named tuple, as its _make makes it
        slots = "".join(f"p{i}, " for i in range(n_slots))

        def addresses(tests: list[str]) -> list[str]:  # MISS where any test holds (with passed: at new addresses)
            test = f"if {' or '.join(tests)}:\n"
            return [] if not tests else [f"    {test}        return MISS"] if "passed" not in env else \
                [f"    if ptrs != passed[0]:\n        {test}            return MISS\n        passed[0] = ptrs"]
        source = ["def run(handle, args, kwargs, ptrs):", *([f"    {slots}= ptrs"] if n_slots else []),
                  *addresses(tests), *lines]
        if guard is not None:  # its tests of the addresses (alignment, sharing) with the overlaps
            checks, addressed, names = guard
            env.update(names)
            listed = [f"    ptrs = [{slots}]"] if "passed" in env else []
            source += ["", "def fast(handle, args, kwargs):", *checks, *listed, *addresses(addressed + tests), *lines]
        self.source = "\n".join(source) + "\n"
        filename = f"<prepared {name} #{next(_SOURCE)}>"
        linecache.cache[filename] = (len(self.source), None, self.source.splitlines(True), filename)
        exec(compile(self.source, filename, "exec"), env)
        self.run, self.fast = env["run"], env.get("fast")

    def __repr__(self) -> str:
        return f"<Prepared {self.name}: {len(self.steps)} step(s), {len(self.news)} new output(s)>"


# ---------------------------------------------------------------- reading the arguments

def _array_part(v: Any, ptrs: list) -> Any:
    """The key part of an array argument, its address appended to ``ptrs``: a DeviceArray's LayoutKey (paired with its
    address's alignment where not 16 bytes), a number or None, a torch tensor's attributes; another array raises."""
    t = type(v)
    if t is DeviceArray:
        p = v.ptr
        ptrs.append(p)
        k = v.layout_key or layout_key(v)
        return (k, p & 15) if p & 15 else k
    if v is None or t in _NUMBERS:  # an argument that may be an array or a number (a seed, a scale): by value
        ptrs.append(None)
        return None if v is None else (t, v)
    if memory.is_torch_tensor(v):
        p = v.data_ptr()
        ptrs.append(p)
        return (t, v.shape, v.stride(), v.dtype, v.get_device(), p & 15)
    raise _Unkeyable


def _extent(v: Any) -> tuple[int, int, int, tuple, tuple, Any]:
    """(address, first byte offset, end byte offset, shape, strides, dtype) of a DeviceArray or torch tensor."""
    if type(v) is DeviceArray:
        shape, strides, dt, ptr = v.shape, v.strides, v.dtype, v.ptr
    else:
        (shape, strides, dt, _), ptr = memory.array_signature(v)
    item = dt.itemsize
    lo, hi = extent(shape, strides)
    return ptr, lo * item, (hi + 1) * item, shape, strides, dt


class _Spec:
    """One operation function's declaration (:func:`prepared`'s arguments) and positional parameters."""

    def __init__(self, fn: Callable, inputs: Sequence[str], outputs: Sequence[str], inplace: bool,
                 scalars: Sequence[str], moved: Sequence[str]):
        params = list(inspect.signature(fn).parameters.values())[1:]  # after the handle
        self.fn, self.name, self.inplace = fn, fn.__name__, inplace
        self.positional = tuple(p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
        self.arrays = frozenset(inputs) | frozenset(outputs)
        self.outputs = frozenset(outputs)
        self.scalars, self.moved = tuple(scalars), tuple(moved)
        self.varargs = any(p.kind == p.VAR_POSITIONAL for p in params)  # extra positionals are its own business
        self.required = sum(p.default is p.empty for p in params if p.name in self.positional)
        keyword = {p.name: p.default for p in params if p.kind == p.KEYWORD_ONLY}
        missing = (self.arrays - {p.name for p in params}) | (set(self.scalars) | set(self.moved)) - set(keyword)
        if missing:
            raise TypeError(f"{self.name} has no parameters {sorted(missing)} (scaling factors and moved outputs are "
                            f"keyword-only)")
        words = {p.name: set(re.findall(r"\w+", p.annotation if isinstance(p.annotation, str) else
                                        repr(p.annotation))) for p in params}
        undeclared = [p.name for p in params if p.name not in self.arrays and _ARRAY_TYPES & words[p.name]]
        if undeclared:
            raise TypeError(f"{self.name} takes arrays {undeclared} that are neither inputs nor outputs: declare them "
                            f"(a call passing an undeclared array to C is never prepared)")
        self.is_array = tuple(n in self.arrays for n in self.positional)
        #: the arrays whose annotation (an array type, not optional) refuses None
        self.needed = tuple(p.name for p in params if p.default is p.empty and _ARRAY_TYPES & words[p.name]
                            and not {"None", "Optional"} & words[p.name])
        self.optional = frozenset(n for n in self.scalars if keyword[n] is None)  # None: the function's own default
        self.inputs = frozenset(inputs)
        self.defaults = {p.name: p.default for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        self.blends = tuple(n for n in self.scalars if n.startswith("beta"))  # a given output's blend factors
        #: the outputs the engine choice keys as "out": optional (None: allocated) and not read
        self.loose = frozenset(n for n in self.outputs - self.inputs if self.defaults.get(n) is None)

    def checked(self, handle: Any, args: tuple, kwargs: dict) -> tuple[Any, tuple, dict]:
        """The checks every operation function shares, before its own: the handle, outputs passed positionally
        (moved to their keywords, with a :class:`DeprecationWarning`), the scaling factors."""
        handle = handle_arg(handle)
        npos = len(self.positional)
        if len(args) > npos and not self.varargs:
            extra, args = args[npos:], args[:npos]
            given = moved_outputs(self.name, extra, self.moved, tuple(kwargs.get(n) for n in self.moved))
            kwargs.update(zip(self.moved[:len(extra)], given))
        values = {**dict(zip(self.positional, args)), **kwargs}
        for n in self.needed:
            if n in values and values[n] is None:
                raise InvalidTypeError(f"{self.name}(): {n} is a required array, got None")
        for n in self.scalars:
            if n in kwargs and not (kwargs[n] is None and n in self.optional):
                kwargs[n], = scaling(**{n: kwargs[n]})
        return handle, args, kwargs

    def slots(self, args: tuple, kwargs: dict) -> list[tuple[str, Any, Any]]:
        """(name, where, value) of each array argument, in the key's order (``where``: ("arg", i) or ("kw", name))."""
        out = [(n, ("arg", i), v) for i, (n, v, a) in enumerate(zip(self.positional, args, self.is_array)) if a]
        return out + [(k, ("kw", k), v) for k, v in kwargs.items() if k in self.arrays]


class _Call:
    """The operation call whose validated path runs (``recording.state.call``): what :mod:`cudnn_py.calls.engine_choice`
    takes from its declaration."""

    __slots__ = ("spec", "args", "kwargs")

    def __init__(self, spec: _Spec, args: tuple, kwargs: dict):
        self.spec, self.args, self.kwargs = spec, args, kwargs

    def _values(self) -> Iterator[tuple[str, Any]]:
        """Each parameter's name and value (its default where not given), then any others: extra positionals as
        ``("*", value)``, extra keywords (deprecated spellings) by name."""
        spec, npos = self.spec, len(self.spec.positional)
        given = dict(zip(spec.positional, self.args))
        given.update(self.kwargs)
        for name, default in spec.defaults.items():
            yield name, given.pop(name, default)
        yield from (("*", v) for v in self.args[npos:])
        yield from sorted(given.items())

    def key(self) -> tuple:
        """The engine choice's key: the function's name, then each (name, value) of :meth:`_values`, an array by its
        shape, strides and dtype; an optional output not declared an input only as "out", given or not (so both
        share one choice and give the same numbers). A required output (``add_tensor``'s ``c``, whose shape sets
        the broadcast) has no allocated twin: it is keyed by its signature."""
        spec = self.spec
        return (spec.name, *((n, "out" if n in spec.loose else _signature(v) if n in spec.arrays else _hashable(v))
                             for n, v in self._values()))

    def mutated(self) -> tuple[DeviceArray, ...]:
        """The given outputs the call reads as well as writes: all where a ``beta*`` factor is not 0 (or None), those
        declared inputs too, those sharing memory with an input."""
        spec = self.spec
        values = dict(self._values())
        blend = any(values[n] is None or values[n] != 0 for n in spec.blends)
        views = {n: memory.as_array(v, n) for n, v in values.items()
                 if n in spec.arrays and v is not None and type(v) not in _NUMBERS}
        ins = [_extent(a)[:3] for n, a in views.items() if n in spec.inputs]

        def reads(n: str, a: DeviceArray) -> bool:
            p, lo, hi, *_ = _extent(a)
            return blend or n in spec.inputs or any(p + lo < q + ihi and q + ilo < p + hi for q, ilo, ihi in ins)
        return tuple(a for n, a in views.items() if n in spec.outputs and reads(n, a))


def _signature(v: Any) -> Any:
    if v is None or type(v) in _NUMBERS:
        return v
    return memory.array_signature(v)[0][:3]


def _hashable(v: Any) -> Any:
    """``v`` as a key part: sequences as tuples, anything unhashable by its ``repr``."""
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(x) for x in v)
    try:
        hash(v)
    except TypeError:
        return repr(v)
    return v


def _readable(v: Any) -> bool:
    return type(v) is DeviceArray or memory.is_torch_tensor(v) and v.is_cuda


def _readable_view(v: Any) -> Any:
    """``v`` where :func:`_extent` reads it as it is, else the DeviceArray view of a foreign array (one with
    ``__cuda_array_interface__`` or ``__dlpack__``; no copy), else None (no array, or one the validated path
    refuses)."""
    if _readable(v):
        return v
    try:
        return memory.as_array(v) if hasattr(v, "__cuda_array_interface__") or hasattr(v, "__dlpack__") else None
    except CudnnPyError:
        return None


def _refuse_overlap(spec: _Spec, slots: list) -> None:
    """Refuse, for arrays of every kind: one whose elements overlap (a broadcast view: cuDNN's legacy descriptors
    refuse it, and an output of it would be written by racing threads); two given outputs sharing an element; a
    given output sharing an element with an input other than as the identical view (and that one too where the
    operation has no in-place form). Interleaved views of one buffer (packed dq, dk, dv) share none."""
    arrays = [(n, _extent(v)) for n, v in ((n, _readable_view(v)) for n, _, v in slots) if v is not None]
    for n, (_, _, _, shape, strides, _) in arrays:
        check_layout(shape, strides, f"{spec.name}: {n}'s")
    outs = {k for k, (n, _) in enumerate(arrays) if n in spec.outputs}
    for o, i in sharing([(p, sh, st, dt.itemsize) for _, (p, _, _, sh, st, dt) in arrays], outs):
        (on, (po, _, _, osh, ost, odt)), (iname, (pi, _, _, ish, ist, idt)) = arrays[o], arrays[i]
        if i in outs:
            raise InvalidValueError(f"{spec.name}: outputs {on} and {iname} share memory: pass separate memory")
        if (po, osh, ost, odt) == (pi, ish, ist, idt):
            if spec.inplace:
                continue
            raise InvalidValueError(f"{spec.name}: {on} is {iname} itself; this operation has no in-place form "
                                    f"(pass separate memory)")
        raise InvalidValueError(f"{spec.name}: {on} shares memory with {iname} but is not the same view (shape "
                                f"{osh}, strides {ost}, address {po:#x} against {ish}, {ist}, {pi:#x}): pass "
                                f"{iname} itself for in place, or separate memory")


def _as_given(result: Any, spec: _Spec, slots: list) -> Any:
    """``result`` with each element that is a view of a given output (its memory, shape, strides and dtype: the
    checked DeviceArray a function made of a torch output) replaced by the caller's own object."""
    given = [(_extent(v), v) for n, _, v in slots if n in spec.outputs and _readable(v)]
    if not given:
        return result

    def one(r: Any) -> Any:
        if type(r) is DeviceArray:
            for (p, _, _, shape, strides, dt), v in given:
                if r.ptr == p and r.shape == tuple(shape) and r.strides == tuple(strides) and r.dtype == dt:
                    return v
        return r
    return _each(result, one)


def _each(result: Any, one: Callable[[Any], Any]) -> Any:
    """``one(result)``, or for a tuple result (named or not) the same tuple of ``one`` of each element."""
    if not isinstance(result, tuple):
        return one(result)
    items = [one(r) for r in result]
    return tuple(items) if type(result) is tuple else type(result)._make(items)  # type: ignore[attr-defined]


# ---------------------------------------------------------------- making a prepared call from a recording

def _make(spec: _Spec, rec: recording.Recording, result: Any, slots: list, ptrs: list,
          guard: tuple[list[str], list[str], dict] | None = None) -> Prepared | None:
    """The prepared call of a validated call's recording (with ``guard``: :func:`_guard`), or None where it cannot be
    replayed as it stands."""
    if rec.spoiled is not None or not rec.steps:
        return None
    items = list(result) if isinstance(result, tuple) else [result]
    shape = type(result) if isinstance(result, tuple) else None
    if shape is not None and shape is not tuple and not hasattr(shape, "_make"):
        return None
    given = {id(v): where for _, where, v in slots if v is not None}
    src: list[tuple] = []
    new: list[DeviceArray] = []
    for v in items:
        if v is None:
            src.append(("none", 0))
        elif id(v) in given:
            src.append(given[id(v)])
        elif type(v) is DeviceArray:
            src.append(("new", len(new)))
            new.append(v)
        else:
            return None  # something the call computed on the host: not replayable from addresses alone
    known = [p for p in ptrs] + [a.ptr for a in new]
    used: set[int] = set()
    steps = []
    workspace = 0
    closable: dict[int, Descriptor] = {}
    for step in rec.steps:
        closable.update((id(d), d) for d in step.keep if isinstance(d, Descriptor) and not d.is_shared)
        base, subs, ws = list(step.args), [], []
        workspace = max(workspace, step.workspace)
        for pos in step.pointers:
            try:
                slot = known.index(base[pos])
            except ValueError:
                return None  # an address that is none of the call's arrays (a scratch buffer)
            subs.append((pos, slot))
            used.add(slot)
            base[pos] = None
        for pos, a in enumerate(base):
            if type(a) is recording.WorkspaceArg:
                if a.size:
                    ws.append((pos, a.offset))
                    workspace = max(workspace, a.size)
                else:
                    base[pos] = None
        steps.append((step.call, base, tuple(subs), tuple(ws), step.keep))
    if any(len(ptrs) + k not in used for k in range(len(new))):
        return None  # a new output no step writes
    # what a repeat call checks: each given output against each input and each later output (arrays, not None or a
    # number); exact in-place pairs stay so, as the key holds which arrays share an address, and so do pairs whose
    # extents overlap without a common element (checked by the validated path): at their offset ``d``
    ext = [(k, n in spec.outputs, *_extent(v)[:3]) for k, (n, _, v) in enumerate(slots) if _readable(v)]
    overlaps = [(o, i, olo, ohi, ilo, ihi, po - pi if ilo - ohi < po - pi < ihi - olo else None)
                for o, o_out, po, olo, ohi in ext if o_out
                for i, i_out, pi, ilo, ihi in ext if (not i_out or i > o) and po != pi]
    torch = package([v for n, _, v in slots if n not in spec.outputs]) == "torch"
    alloc = (lambda a: _hooks("torch").allocator(a.shape, a.strides, a.dtype, a.device_id)) if torch else \
        _device_allocator  # DeviceArrays (a foreign package's calls are never keyed)
    # DeviceArrays viewing one allocation stay views of one (a view costs less than an allocation); torch tensors are
    # allocated one by one (torch's allocation costs less than its as_strided view)
    shared = {} if torch else _shared(new, {*given, *map(id, new)})
    owners = list({id(o): o for o, _ in shared.values()}.values())  # allocated once each, viewed by its outputs
    news = [(owners.index(shared[k][0]), shared[k][1] * a.dtype.itemsize, memory.array_maker(
        a.shape, a.dtype, a.strides, a.device_id, a.is_contiguous, layout_key(a))) if k in shared else alloc(a)
        for k, a in enumerate(new)]
    return Prepared(spec.name, steps, news, overlaps, tuple(src), shape, len(ptrs), frozenset(rec.uses), workspace,
                    tuple(closable.values()), [_device_allocator(o) for o in owners], guard)


def _shared(new: list[DeviceArray], seen: set[int]) -> dict[int, tuple[DeviceArray, int]]:
    """{index: (allocation, element offset)} of the new outputs that are views (strides >= 0, the allocation's dtype)
    inside one C-contiguous DeviceArray the call made, viewed at least twice and neither returned nor an argument
    (ids ``seen``): a family's outputs allocated together (batch norm's saved statistics)."""
    by_owner: dict[int, list[tuple[int, int]]] = {}
    for k, a in enumerate(new):
        o = a.owner
        if (type(o) is not DeviceArray or id(o) in seen or not o.is_contiguous or o.dtype != a.dtype
                or o.device_id != a.device_id or min(a.strides, default=0) < 0):
            continue
        offset, rest = divmod(a.ptr - o.ptr, a.dtype.itemsize)
        if not rest and 0 <= offset and offset + a.span()[1] <= o.size:
            by_owner.setdefault(id(o), []).append((k, offset))
    return {k: (new[k].owner, offset) for views in by_owner.values() if len(views) > 1 for k, offset in views}


def _guard(spec: _Spec, args: tuple, kwargs: dict, ptrs: list,
           epoch: tuple[Callable[[], Any], Any] | None) -> tuple[list[str], list[str], dict] | None:
    """The guard of a prepared call made from a call keyed with ``args``, ``kwargs`` (as given), ``ptrs`` and
    ``epoch`` (the function and the value it answered): lines of ``fast(handle, args, kwargs)`` answering
    :data:`MISS` unless the call would build the same key (the checks in the key's order, the epoch's last; a
    contiguous torch tensor's strides may differ in dims of size 1, which change no address), the
    addresses left in ``p0, p1, ...`` in the key's order; the tests of those addresses alone (each true on a miss:
    their alignment, which of them are equal), which :class:`Prepared` places; the names both read. None where it
    cannot say (then only the key finds the prepared call)."""
    env: dict[str, Any] = {"DeviceArray": DeviceArray, "layout_key": layout_key}
    lines = [f"    if len(args) != {len(args)} or len(kwargs) != {len(kwargs)}:", "        return MISS"]
    if args:
        lines.append(f"    {''.join(f'a{i}, ' for i in range(len(args)))}= args")
    values = [(f"a{i}", spec.is_array[i], v) for i, v in enumerate(args)]
    values += [(f"w{j}", k in spec.arrays, v) for j, (k, v) in enumerate(kwargs.items())]
    addressed, aligned, slot, miss = [], [], 0, "        return MISS"
    for j, (var, is_array, v) in enumerate(values):
        if j == len(args):  # the keywords, once the positional arguments passed (a miss mostly fails on the first)
            lines.append(f"    try:\n        {''.join(f'w{i}, ' for i in range(len(kwargs)))}= "
                         f"{''.join(f'kwargs[{k!r}], ' for k in kwargs)}\n    except KeyError:\n        return MISS")
        t = type(v)
        if not is_array or v is None or t in _NUMBERS:
            if v is None:
                lines.append(f"    if {var} is not None:\n{miss}")
            else:
                env[f"gT{j}"], env[f"gV{j}"] = t, v
                lines.append(f"    if {var} is not gV{j} and (type({var}) is not gT{j} or {var} != gV{j}):\n{miss}")
            if is_array:
                lines.append(f"    p{slot} = None")
        elif t is DeviceArray:
            env[f"gL{j}"] = v.layout_key
            lines.append(f"    if type({var}) is not DeviceArray or ({var}.layout_key or layout_key({var})) is not "
                         f"gL{j}:\n{miss}\n    p{slot} = {var}.ptr")
        elif memory.is_torch_tensor(v):
            env.update({f"gT{j}": t, f"gS{j}": v.shape, f"gR{j}": v.stride(), f"gD{j}": v.dtype,
                        f"gG{j}": v.get_device()})
            # a contiguous tensor's strides by torch's own test (half the cost of reading them): they may then differ
            # in dims of size 1, which address no other element
            layout = f"not {var}.is_contiguous()" if v.is_contiguous() else f"{var}.stride() != gR{j}"
            lines.append(f"    if type({var}) is not gT{j} or {var}.shape != gS{j} or {layout} or "
                         f"{var}.dtype is not gD{j} or {var}.get_device() != gG{j}:\n{miss}\n"
                         f"    p{slot} = {var}.data_ptr()")
        else:
            return None
        if is_array:
            if ptrs[slot] is not None:
                if ptrs[slot] & 15:
                    addressed.append(f"p{slot} & 15 != {ptrs[slot] & 15}")
                else:
                    aligned.append(f"p{slot}")
            slot += 1
    if slot != len(ptrs):
        return None
    if aligned:
        addressed.append(f"({' | '.join(aligned)}) & 15")
    first = {p: ptrs.index(p) for p in ptrs}  # the arrays that shared an address share it again, and no others:
    apart = [f"p{i}" for i in first.values()]  # each equal to the first of its address, those firsts apart
    addressed += [f"p{i} != p{first[p]}" for i, p in enumerate(ptrs) if first[p] != i]
    addressed += [f"len({{{', '.join(apart)}}}) != {len(apart)}"] if len(apart) > 3 else \
        [f"{a} == {b}" for k, b in enumerate(apart) for a in apart[:k]]
    if epoch is not None:
        env["epoch"], env["gE"] = epoch
        lines.append("    if epoch() != gE:\n        return MISS")
    return lines, addressed, env


def replay(fn: Callable[..., Any], handle: Any, args: tuple, kwargs: dict) -> Any:
    """The generated wrapper's first step (inlined there) for callers checking only new arguments: ``fn(handle, *args,
    **kwargs)`` by the prepared call ``fn`` ran last on ``handle`` where this call has its signature, else MISS."""
    if state.rec is not None:
        return MISS
    fast = handle.cache.get(CACHE, _NONE).front.get(fn.__wrapped__)  # type: ignore[attr-defined]
    if fast is None:
        return MISS
    try:
        return fast(handle, args, kwargs)
    except WorkspaceLimitError:  # the workspace cap was lowered since: the wrapper makes it again
        return MISS


# ---------------------------------------------------------------- forgetting

def forget(handle: Any, *names: str) -> None:
    """Drop the prepared calls of ``handle`` (None: of every handle) built on any of the handle caches ``names``
    (what their recordings :func:`~cudnn_py.clib.recording.uses`): a cache clear makes them again from what it left."""
    wanted = frozenset(names)
    caches = list(_CACHES.values()) if handle is None else [handle.cache.get(CACHE)] if hasattr(handle, "cache") else []
    for cache in caches:
        if cache:
            for key, p in list(cache.items()):
                if p.uses & wanted:
                    cache.pop(key, None)


engine_choice.on_mode_change(lambda: forget(None, engine_choice.CACHE))


# ---------------------------------------------------------------- the call wrapper, generated

#: reading array argument ``{v}``'s key part into ``{k}``: :func:`_array_part` inlined (DeviceArrays, known torch types)
_READ = """\
t = type({v})
if t is DeviceArray:
    q = {v}.ptr
    ptrs.append(q)
    {k} = {v}.layout_key or layout_key({v})
    if q & 15:
        {k} = ({k}, q & 15)
elif t in foreign.TORCH_TYPES:
    q = {v}.data_ptr()
    ptrs.append(q)
    {k} = (t, {v}.shape, {v}.stride(), {v}.dtype, {v}.get_device(), q & 15)
else:
    {k} = part({v}, ptrs)
"""

_CALL = """\
def call(handle, *args, **kwargs):
    if type(handle) is not Handle or handle._ptr is None or state.rec is not None:
        return validated(handle, args, kwargs)  # a stand-in or closed handle, in a recording
    calls = handle.cache.get(CACHE, NONE)
    fast = calls.front.get(fn)  # the prepared call this function ran last: its guard, then its work
    if fast is not None:
        try:
            got = fast(handle, args, kwargs)
        except WorkspaceLimitError:
            got = MISS
        if got is not MISS:
            return got
    ptrs = []
    try:
        n = len(args)
{positional}\
        else:  # outputs passed positionally after the inputs (deprecated)
            return validated(handle, args, kwargs)
        for name, v in kwargs.items():
            parts.append(name)
            if name in arrays:
{keyword}\
                parts.append(kp)
            else:
                parts.append(v if type(v) in PLAIN else (type(v), v))
        n = len(ptrs)
        if n > 1 and (ptrs[0] == ptrs[1] if n == 2 else len(set(ptrs)) < n):  # arrays sharing an address
            parts.append(tuple(map(ptrs.index, ptrs)))
        key = tuple(parts)
        p = calls.get(key)  # hashes the key: an unhashable option raises here
    except (Unkeyable, TypeError):  # a foreign array, an unhashable option: validated every call
        return first(handle, args, kwargs, None, ptrs)
    if p is not None:
        try:
            got = p.run(handle, args, kwargs, ptrs)
        except WorkspaceLimitError:  # the handle's workspace cap was lowered since: made again under it
            got = MISS
        if got is not MISS:
            calls.front[fn] = p.fast
            return got
    return first(handle, args, kwargs, key, ptrs)
"""


@functools.lru_cache(maxsize=None)
def _caller(is_array: tuple[bool, ...], required: int, epoch: bool) -> Any:
    """The compiled wrapper ``call(handle, *args, **kwargs)`` of the functions whose positional parameters are arrays
    where ``is_array`` says, ``required`` without a default: from ``required`` up, a branch per count of positional
    arguments reads them without a loop (which cost relu's call 0.2 us on the CPU machine); fewer take a loop."""
    head = ["fn", "epoch()"] if epoch else ["fn"]
    branches = []
    for j, n in enumerate([required, *range(len(is_array), required, -1)]):
        lines = [f"{'el' if j else ''}if n == {n}:"]
        if n:
            lines.append(f"    {', '.join(f'a{i}' for i in range(n))}{',' if n == 1 else ''} = args")
        parts = list(head)
        for i in range(n):
            if is_array[i]:
                lines.append(textwrap.indent(_READ.format(v=f"a{i}", k=f"k{i}"), "    ").rstrip())
                parts.append(f"k{i}")
            else:
                parts.append(f"a{i} if type(a{i}) in PLAIN else (type(a{i}), a{i})")
        lines.append(f"    parts = [{', '.join(parts)}]")
        branches.append(textwrap.indent("\n".join(lines) + "\n", " " * 8))
    if required:
        branches.append(textwrap.indent(f"""\
elif n < {required}:
    parts = [{', '.join(head)}]
    for v, a in zip(args, is_array):
        parts.append(part(v, ptrs) if a else v if type(v) in PLAIN else (type(v), v))
""", " " * 8))
    source = _CALL.format(positional="".join(branches),
                          keyword=textwrap.indent(_READ.format(v="v", k="kp"), " " * 16))
    filename = f"<prepared call {''.join('a' if a else 'v' for a in is_array)} {required}{' epoch' if epoch else ''}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return compile(source, filename, "exec")


#: the names the generated wrappers read (this module's name too: deprecation warnings look past its frames)
_CALLER_ENV = {"__name__": __name__, "Handle": Handle, "state": state, "DeviceArray": DeviceArray,
               "layout_key": layout_key, "foreign": foreign, "part": _array_part, "PLAIN": _PLAIN, "CACHE": CACHE,
               "NONE": _NONE, "Unkeyable": _Unkeyable, "MISS": MISS, "WorkspaceLimitError": WorkspaceLimitError}


# ---------------------------------------------------------------- the decorator

def prepared(inputs: Sequence[str], outputs: Sequence[str], *, inplace: bool = True,
             epoch: Callable[[], Any] | None = None, scalars: Sequence[str] = (),
             moved: Sequence[str] = ()) -> Callable[[F], F]:
    """Run an operation function ``fn(handle, ...)`` through the handle's prepared calls (module doc); ``fn`` itself
    runs, after the checks :meth:`_Spec.checked` makes, on a signature's first call (every call that cannot be keyed).

    :param inputs, outputs: the array parameters it reads, and writes (None: allocated and returned).
    :param inplace: whether an output may be an input itself (the identical view).
    :param epoch: a function answering the version of state outside the arguments the validated path depends on
        (measured algorithm choices that can be cleared): part of the key.
    :param scalars: its scaling factors (keyword-only), checked finite and passed on as floats.
    :param moved: its keyword-only outputs a call may still pass positionally after the inputs (deprecated).
    """
    def wrap(fn: F) -> F:
        spec = _Spec(fn, inputs, outputs, inplace, scalars, moved)

        def validated(handle: Any, args: tuple, kwargs: dict) -> Any:
            handle, args, kwargs = spec.checked(handle, args, kwargs)
            _refuse_overlap(spec, spec.slots(args, kwargs))
            outer, state.call = state.call, _Call(spec, args, kwargs)
            try:
                return fn(handle, *args, **kwargs)
            finally:
                state.call = outer

        def first(handle: Any, args: tuple, kwargs: dict, key: tuple | None, ptrs: list) -> Any:
            slots = spec.slots(args, kwargs)
            # the keywords as the key read them, for its guard (the checks convert scaling factors in place)
            as_keyed = {} if key is None else dict(kwargs)
            with recording.recording() as rec:
                result = _as_given(validated(handle, args, kwargs), spec, slots)
            if key is not None:
                p = _make(spec, rec, result, slots, ptrs,
                          _guard(spec, args, as_keyed, ptrs, None if epoch is None else (epoch, key[1])))
                if p is not None:
                    cache = handle_cache(handle, CACHE)
                    cache[key] = p
                    cache.front[fn] = p.fast
                    _CACHES[id(cache)] = cache
            pkg = package([v for n, _, v in slots if n not in spec.outputs])
            if pkg is None:
                return result
            given = {id(v) for _, _, v in slots}
            return _each(result, lambda r: r if id(r) in given else to_package(r, pkg))

        env: dict[str, Any] = {**_CALLER_ENV, "fn": fn, "epoch": epoch, "validated": validated, "first": first,
                               "arrays": spec.arrays, "is_array": spec.is_array}
        exec(_caller(spec.is_array, spec.required, epoch is not None), env)
        call = functools.wraps(fn)(env["call"])
        call.__prepared__ = spec  # type: ignore[attr-defined]
        return call  # type: ignore[return-value]
    return wrap

