"""streams.get_device: ``None`` is this thread's current device at each call (CPU, with a stand-in cuda.core)."""
from __future__ import annotations

import threading
import functools
import math
import types

import numpy as np
import pytest

from cudnn_py.core import streams
from cudnn_py.errors import InvalidTypeError, InvalidValueError


class _FakeCore:
    """Stands in for cuda.core: ``Device()`` answers the 'current' device (as cuCtxGetDevice would) and
    ``set_current`` makes a device current; calls are counted."""

    def __init__(self):
        self.current = None  # no context current yet: Device() answers 0
        self.made = []
        core = self

        class Device:
            def __init__(self, device_id=None):
                self.device_id = (0 if core.current is None else core.current) if device_id is None else device_id
                core.made.append(device_id)

            def set_current(self):
                core.current = self.device_id

        self.Device = Device


@pytest.fixture
def core(monkeypatch):
    fake = _FakeCore()
    monkeypatch.setattr(streams, "_core", fake)
    monkeypatch.setattr(streams, "_has_context", lambda: fake.current is not None)
    monkeypatch.setattr(streams, "_tls", threading.local())
    return fake


def test_none_follows_the_current_device_each_call(core):
    assert streams.get_device(None).device_id == 0  # none current: device 0, made current
    assert core.current == 0
    assert streams.get_device(1).device_id == 1 and core.current == 1
    assert streams.get_device(None).device_id == 1  # the old code answered its first answer, 0, here
    core.current = 0  # another library (torch.cuda.set_device) switched the thread back
    assert streams.get_device(None).device_id == 0
    assert streams.get_device(None) is streams.get_device(0)  # one Device object per ordinal and thread


def test_known_ordinals_are_a_lookup(core):
    dev = streams.get_device(2)
    n = len(core.made)
    assert streams.get_device(2) is dev and len(core.made) == n  # no new cuda.core call
    core.current = 2
    assert streams.get_device(None) is dev and core.made[n:] == [None]  # one query of the current device


def test_each_thread_has_its_own_current_device(core):
    streams.get_device(1)
    seen = []
    t = threading.Thread(target=lambda: seen.append(streams.get_device(None).device_id))
    core.current = None  # the new thread has no context current
    t.start()
    t.join()
    assert seen == [0]


def test_bad_devices_are_refused(core):
    with pytest.raises(ValueError, match=">= 0"):
        streams.get_device(-1)
    with pytest.raises(TypeError, match="int ordinal"):
        streams.get_device("0")
    with pytest.raises(TypeError, match="int ordinal"):
        streams.get_device(True)


def test_no_current_context_is_device_0_without_asking_cuda_core(core):
    """cuda.core's Device() would probe with cuCtxGetDevice, which fails (and is reported by compute-sanitizer)
    where no context is current: that case is answered before cuda.core is asked."""
    assert streams._current_ordinal() == 0 and core.made == []
    core.current = 1
    assert streams._current_ordinal() == 1 and core.made == [None]


def test_a_failing_driver_query_is_a_no_device_error(monkeypatch):
    def broken(device_id=None):
        raise RuntimeError("cuInit failed")
    monkeypatch.setattr(streams, "_core", types.SimpleNamespace(Device=broken))
    monkeypatch.setattr(streams, "_has_context", lambda: True)
    monkeypatch.setattr(streams, "_tls", threading.local())
    monkeypatch.setattr(streams, "_no_device", lambda device, cause: streams.NoDeviceError(
        "cannot use CUDA device 0", 0, "", str(cause)))
    with pytest.raises(streams.NoDeviceError, match="cuInit failed"):
        streams.get_device(None)


def test_the_hold_latch_takes_tickets_and_releases_cyclically(monkeypatch):
    """``timer(hold=True)``'s latch (no driver): each hold queues a wait for the next ticket (wrapping at 2**32);
    a release writes its ticket only where the word is not already at or past it, cyclically; a driver that cannot
    hold streams answers None (its ticket is spent: harmless, a later release passes it); the driver is called
    outside the latch's lock."""
    import ctypes
    waits, status = [], [0]

    def wait(stream, address, value, flags):
        assert not latch.lock.locked()  # the driver may wait for a thread that needs the lock to release its hold
        waits.append((stream, address, value, flags))
        return (status[0],)
    monkeypatch.setattr(streams, "driver", lambda: types.SimpleNamespace(cuStreamWaitValue32=wait))
    latch = object.__new__(streams._Latch)
    latch.word, latch.ticket, latch.lock, latch.address = ctypes.c_uint32(0), 0, threading.Lock(), "word"
    s = types.SimpleNamespace(handle="s")
    assert latch.hold(s) == 1 and waits == [("s", "word", 1, 0)]  # flags 0: cyclic greater-or-equal
    assert latch.release(1) and latch.word.value == 1
    assert not latch.release(1)                                # let go already (the watchdog, or exit)
    latch.word.value = 5
    assert not latch.release(3) and latch.word.value == 5      # a later ticket was released: never back
    assert latch.release(7) and latch.word.value == 7
    latch.word.value, latch.ticket = 0xFFFFFFFE, 0xFFFFFFFF
    assert latch.hold(s) == 0                                  # the ticket after 2**32 - 1
    assert latch.release(0) and latch.word.value == 0          # 0 comes after 0xFFFFFFFE
    assert not latch.release(0xFFFFFFFF)                       # and 2**32 - 1 before 0
    status[0] = 801                                            # CUDA_ERROR_NOT_SUPPORTED
    assert latch.hold(s) is None and latch.ticket == 1


class _Event:
    """A recorded event of a stand-in stream: 1.5 ms after any other."""

    def __sub__(self, other):
        return 1.5

    def sync(self):
        pass


def test_a_held_timer_starts_its_watchdog_before_holding_and_collects_no_garbage_meanwhile(monkeypatch):
    """While ``timer(hold=True)`` holds its stream the garbage collector is off (a collected plan's destroy call
    waits for the GPU, which waits for the release: an autotune deadlocked so on an H200, the collection running in
    the watchdog's thread as it started); the watchdog thread runs before the stream is held; on exit the stream is
    let go and collection resumes, also where holding fails (no driver: fakes)."""
    import gc
    import threading
    order = []

    class Stream:
        def record(self, options=None):
            order.append(("record", gc.isenabled()))
            return _Event()

    class Latch:
        fail = False

        def hold(self, stream):
            order.append(("hold", any(isinstance(t, threading.Timer) and t.is_alive() for t in threading.enumerate()),
                          gc.isenabled()))
            if self.fail:
                raise KeyboardInterrupt
            return 7

        def release(self, ticket):
            order.append(("release", ticket))
            return True
    latch = Latch()
    monkeypatch.setattr(streams, "as_stream", lambda s=None, d=None: Stream())
    monkeypatch.setattr(streams, "_the_latch", lambda: latch)
    alone = [True]  # whether this is the process's only thread (a hold needs that)
    real_count = threading.active_count
    monkeypatch.setattr(streams.threading, "active_count", lambda: 1 if alone[0] else real_count())
    assert gc.isenabled()
    with streams.timer(None, hold=True) as t:
        assert not gc.isenabled()
    assert gc.isenabled() and t.held and t.ms == 1.5
    assert order == [("hold", True, False), ("record", False), ("record", False), ("release", 7)]
    latch.fail = True
    failing = streams.timer(None, hold=True)
    with pytest.raises(KeyboardInterrupt):
        with failing:
            pass
    failing._watchdog.join(1.0)
    assert gc.isenabled() and not failing._watchdog.is_alive() and not failing.held
    latch.fail = False
    gc.disable()
    try:
        with streams.timer(None, hold=True):
            pass
        assert not gc.isenabled()  # the program's own setting is kept
    finally:
        gc.enable()
    order.clear()
    alone[0] = False
    other = threading.Thread(target=threading.Event().wait, args=(5.0,), daemon=True)
    other.start()  # another thread could wait device-wide for a held stream: no hold (H200: a hang)
    with streams.timer(None, hold=True) as t:
        assert gc.isenabled()
    assert not t.held and t.ms == 1.5 and order == [("record", True), ("record", True)]


def test_a_held_timer_holds_while_an_earlier_timers_watchdog_is_still_on_its_way_out(monkeypatch):
    """A cancelled watchdog can outlive its timer by a moment under CPU load; the next sample must still hold (a
    sweep's workers, 16 processes compiling plans on 16 cores, timed most samples unheld: H100, 2026-12-06)."""
    import threading

    class Stream:
        def record(self, options=None):
            return _Event()

    class Latch:
        def hold(self, stream):
            return 3

        def release(self, ticket):
            return True
    monkeypatch.setattr(streams, "as_stream", lambda s=None, d=None: Stream())
    monkeypatch.setattr(streams, "_the_latch", lambda: Latch())
    class Thread:
        def __init__(self, name):
            self.name = name
    lingering = [threading.current_thread(), Thread(streams._WATCHDOG)]   # cancelled, not yet exited
    monkeypatch.setattr(streams.threading, "active_count", lambda: len(lingering))
    monkeypatch.setattr(streams.threading, "enumerate", lambda: list(lingering))
    with streams.timer(None, hold=True) as t:
        pass
    assert t.held
    lingering.append(Thread("some other thread"))       # any other thread: no hold
    with streams.timer(None, hold=True) as t:
        pass
    assert not t.held


def test_a_sample_whose_hold_timed_out_is_taken_again_unheld_and_so_are_the_next(monkeypatch):
    """Work that waits for the device as it is queued (a synchronising call inside) waits for the hold's watchdog:
    ``held_ms`` says so (``timed_out``), takes that sample again unheld and answers not to hold the next (a
    one-process sweep spent 1.8 s a sample so on one engine: H100, cuDNN 9.19); a plan remembers it."""
    import time

    class Stream:
        def record(self, options=None):
            return _Event()

    class Latch:
        def __init__(self):
            self.word, self.ticket = 0, 0

        def hold(self, stream):
            self.ticket += 1
            return self.ticket

        def release(self, ticket):
            if self.word >= ticket:
                return False
            self.word = ticket
            return True
    monkeypatch.setattr(streams, "as_stream", lambda s=None, d=None: Stream())
    monkeypatch.setattr(streams, "_the_latch", functools.cache(Latch))
    monkeypatch.setattr(streams.threading, "active_count", lambda: 1)
    monkeypatch.setattr(streams, "HOLD_TIMEOUT", 0.02)
    held = []

    def waits_for_the_device():  # held: blocks until the watchdog lets the stream go
        held.append(streams._the_latch().word < streams._the_latch().ticket)
        time.sleep(0.2 if held[-1] else 0.01)
    gpu, host, hold = streams.held_ms(None, lambda: time.sleep(0.01))
    assert (gpu, hold) == (1.5, True) and 10 <= host < 1000  # the host's ms around queue()
    gpu, host, hold = streams.held_ms(None, waits_for_the_device)
    assert (gpu, hold) == (1.5, False) and held == [True, False] and 10 <= host < 200  # the unheld sample's
    assert streams.held_ms(None, waits_for_the_device, False)[::2] == (1.5, False) and held == [True, False, False]

    from cudnn_py.graph import plans
    plan = object.__new__(plans.Plan)
    plan.executor = lambda handle, *io: lambda *arrays: waits_for_the_device()
    monkeypatch.setattr(plans, "ordered_pack", lambda plan, pack: ((), ()))
    held.clear()
    plans._sample(plan, types.SimpleNamespace(stream=None), {}, 0, 1)
    plans._sample(plan, types.SimpleNamespace(stream=None), {}, 0, 2)
    # the held sample (its first run stalls), then it again and two more unheld: one stall, never again
    assert not plan.held and held == [True] + [False] * (plans.SAMPLE_RUNS * 4 - 1)


@pytest.mark.parametrize("bad", [-1, 1 << 64, 2**100])
def test_an_int_stream_handle_that_is_no_address_is_refused_before_cuda(bad):
    """cuda.core raised OverflowError for these (the public contract test on an H100, 2026-12-06)."""
    with pytest.raises(InvalidValueError, match="0 <= handle < 2"):
        streams.as_stream(bad)

    class Foreign:
        cuda_stream = bad
    with pytest.raises(InvalidValueError, match="0 <= handle < 2"):
        streams.as_stream(Foreign())


def test_new_stream_checks_its_flags_before_cuda():
    with pytest.raises(InvalidTypeError, match="nonblocking"):
        streams.new_stream(nonblocking=np.zeros((2, 2)))
    with pytest.raises(InvalidTypeError, match="priority"):
        streams.new_stream(priority="junk")


@pytest.mark.parametrize("hold", [np.zeros((2, 2), int), "yes", 2, None])
def test_timer_refuses_a_hold_that_is_no_flag(hold):
    """``hold`` is checked before any stream is touched (a (2, 2) array raised NumPy's ValueError on a GPU)."""
    for make in (lambda: streams.Timer(None, hold), lambda: streams.timer(None, hold=hold)):
        with pytest.raises(InvalidTypeError, match="hold must be True or False"):
            make()


def test_fastest_first_orders_by_gpu_time_and_breaks_host_bound_ties_by_host_time():
    """Where the fastest item's host time exceeds its GPU time, the item within TIE of that GPU time costing the host
    least leads; the rest follow fastest first, one that never timed (NaN) last. A GPU-bound fastest item leads
    whatever the host times (autotune's plans, engine_choice's engines)."""
    TIE, _fastest_first = streams.TIE, streams.fastest_first
    timed = [("slow", 0.010, 0.001), ("fast", 0.0030, 0.012), ("tied", 0.0030 * (1 + TIE), 0.006),
             ("nan", math.nan, 0.001), ("near", 0.0030 * (1 + 2 * TIE), 0.001)]
    assert [p for p, _ in _fastest_first(timed)] == ["tied", "fast", "near", "slow", "nan"]
    assert _fastest_first(timed)[0] == ("tied", 0.0030 * (1 + TIE))
    gpu_bound = [("a", 0.500, 0.010), ("b", 0.500 * (1 + TIE / 2), 0.004), ("c", 0.6, 0.001)]
    assert [p for p, _ in _fastest_first(gpu_bound)] == ["a", "b", "c"]
    # resolution: an absolute tie margin as well (a single event pair's), where it exceeds TIE's
    tiny = [("a", 0.0030, 0.020), ("b", 0.0034, 0.006), ("c", 0.0036, 0.001)]
    assert [p for p, _ in _fastest_first(tiny)] == ["a", "b", "c"]  # 13 % apart: not within TIE
    assert [p for p, _ in _fastest_first(tiny, 0.0005)] == ["b", "a", "c"]  # c is 0.6 us slower: not tied
