"""A guided vtensor.torch.auto step's mechanisms: the saved-tensor hooks (each saved storage an
entry, on the device, on host or dropped), the plan's moves at op boundaries with the passive
eviction behind them, the copies to and from host memory, and recomputation by re-running the aten
op that made a storage, with the RNG state it saw."""
import mmap

import torch

from vtensor.torch import _saved
from vtensor.torch._flat import fill, tensors_in
from vtensor.torch._step_record import _Paused, _storage_key


class _HostPool:
    """Host memory outside malloc's heap (anonymous mappings): on CPU the device is the heap."""

    def __init__(self, cuda):
        self.cuda = cuda

    def take(self, nbytes):
        if self.cuda:
            return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True), None
        m = mmap.mmap(-1, max(nbytes, 1))
        return torch.frombuffer(m, dtype=torch.uint8, count=nbytes) if nbytes else torch.empty(0, dtype=torch.uint8), m


class _Entry:
    """One storage autograd saved: its bytes on the device (dev, uint8), on host, or dropped.
    loc: device, host, in (a copy back in flight, CUDA), dropped, gone."""
    __slots__ = ("name", "nbytes", "dev", "host", "mapping", "event", "refs", "alive", "last", "loc", "device",
                 "rewritten")

    def __init__(self, name, u8):
        self.name, self.nbytes, self.dev, self.device = name, u8.numel(), u8, u8.device
        self.host = self.mapping = self.event = None
        self.refs, self.alive, self.last, self.loc, self.rewritten = 0, True, 0, "device", False


class _Handle:
    """What autograd holds for a saved tensor: its entry (counted), its geometry, and its name on the
    recorder (which writes the name's RELEASE only once the last handle is gone, as plain PyTorch's
    saved tensor lives until autograd lets it go)."""
    __slots__ = ("owner", "entry", "dtype", "size", "stride", "offset", "rec", "name", "__weakref__")

    def __init__(self, owner, entry, t, name):
        self.owner, self.entry, self.rec, self.name = owner, entry, owner._rec, name
        self.dtype, self.size, self.stride, self.offset = t.dtype, tuple(t.size()), tuple(t.stride()), t.storage_offset()
        entry.refs += 1
        self.rec.hold(name)

    def __del__(self):
        self.rec.let_go(self.name)
        self.entry.refs -= 1
        if self.entry.refs == 0:
            self.owner._release(self.entry)


class _Guided:
    """AutoStep's hooks and moves (a mixin: the state is AutoStep's)."""

    # ------------------------------------------------------------------ hooks
    def _pack(self, t):
        rec = self._rec
        if not isinstance(t, torch.Tensor) or t.layout != torch.strided or t.device.type != self.device:
            return ("raw", t)
        name = rec.name_of(t)
        owner = rec.owner.get(_storage_key(t))
        if (name is None or owner is None or _saved.is_parameter(t) or owner in rec.constants
                or _storage_key(t) in self._start_keys):
            return ("raw", t)
        if self._plan is None and owner not in rec.saved:  # the storages the plan may move
            rec.saved.add(owner)
            rec.emit(INSTRUCTION="SAVED", NAME=name)
        with _Paused(rec):
            e = self._entries.get(owner)
            if e is None or not e.alive:
                u8 = torch.empty(0, dtype=torch.uint8, device=t.device)
                u8.set_(t.untyped_storage())
                e = _Entry(owner, u8)
                # Written in place since its op made it: re-running that op would not make these bytes.
                e.rewritten = t._version != rec.made_version.get(owner, t._version)
                self._entries[owner] = e
                self._s["saved_bytes"] += e.nbytes
            elif e.loc != "device":  # moved while Python still held it: its bytes are here
                u8 = torch.empty(0, dtype=torch.uint8, device=t.device)
                u8.set_(t.untyped_storage())
                e.dev, e.host, e.mapping, e.event, e.loc = u8, None, None, None, "device"
        self._touch(e)
        return ("e", _Handle(self, e, t, name), name)

    def _unpack(self, packed):
        if packed[0] == "raw":
            return packed[1]
        _, h, name = packed
        rec = self._rec
        if rec is None:
            raise RuntimeError("vtensor auto: backward ran after `with step:` ended; run forward and backward "
                               "inside one `with step:`")
        w = rec.live.get(name)
        if w is not None and w() is not None:  # Python still holds it: its bytes are there
            return w()
        e = h.entry
        self._touch(e)
        with _Paused(rec):
            self._restore(e)
            v = e.dev.view(h.dtype).as_strided(h.size, h.stride, h.offset)
        rec.adopt(v, name)
        return v

    def _touch(self, e):
        self._clock += 1
        e.last = self._clock

    def _release(self, e):
        if e.alive:
            if e.loc == "host":
                self._host_bytes -= e.nbytes
            e.alive = False
            e.dev = e.host = e.mapping = e.event = None
            e.loc = "gone"

    # ------------------------------------------------------------------ at op boundaries
    def _before_op(self, k):
        made_before = self._s["moves_made"]
        if self._on_plan:
            if k >= len(self._plan["ops"]):
                self._diverged(f"the step runs more ops than the measured one's {len(self._plan['ops'])}")
                return
            for kind, name in self._plan["moves"].get(k, ()):
                if kind in ("swap_out", "drop", "compress"):
                    self._move(kind, name)
        # Every step, the measured one too (it runs as plain PyTorch does until it would pass the
        # budget); the last op's sample still holds where no move ran since (malloc's count is not free).
        made = self._plan["made"] if self._plan is not None else ()
        now = self._sampled if self._s["moves_made"] == made_before else None
        self._keep_within_budget(made[k] if self._on_plan and k < len(made) else 0, now)

    def _after_op(self, k):
        if self._on_plan and self._rec.op_names[k] != self._plan["ops"][k]:
            self._diverged(f"op {k} is {self._rec.op_names[k]} where the measured step ran {self._plan['ops'][k]}")
        if self._on_plan:
            # A prefetch that would pass the budget waits for a later boundary where it fits (or
            # backward's unpack, late).
            due = self._waiting + [n for kind, n in self._plan["moves"].get(k + 1, ()) if kind == "prefetch"]
            self._waiting = []
            for name in due:
                e = self._entries.get(name)
                if e is not None and e.alive and e.loc == "host" and \
                        self._device_bytes() + e.nbytes + self.slack > self.budget:
                    self._waiting.append(name)
                    self._s["prefetches_waited"] += 1
                else:
                    self._move("prefetch", name)
        self._sample()

    def _sample(self):
        b = self._sampled = self._device_bytes()
        # What a plain step would hold here: the device's bytes and the saved bytes on host.
        self._plain_peak = max(self._plain_peak, b + self._host_bytes)
        if b > self._peak:
            self._peak, self._peak_op = b, self._rec.ops if self._rec is not None else None

    def _move(self, kind, name):
        e = self._entries.get(name)
        if e is None or not e.alive:
            self._s["moves_unreachable"] += 1
            return
        if kind != "prefetch" and self._rec.held(name):
            self._s["moves_held"] += 1  # Python still holds it: moving it would free nothing now
            return
        if kind == "drop" and e.loc == "device" and not e.rewritten and self._recomputable(name, set()):
            e.dev, e.loc = None, "dropped"
        elif kind in ("swap_out", "drop", "compress") and e.loc == "device":
            self._to_host(e)  # compress is not followed here; a drop whose lineage is gone is offloaded
        elif kind == "prefetch" and e.loc == "host":
            self._to_device(e)
        else:
            return
        self._s["moves_made"] += 1

    def _keep_within_budget(self, coming=0, now=None):
        """Passive eviction: saved tensors to host, least recently used first, until the device
        holds the budget less `coming` (the bytes the next op makes) and the slack, or none is left
        to move. now: the device's bytes, where just read."""
        tried = set()
        while (now if now is not None else self._device_bytes()) + coming + self.slack > self.budget:
            now = None
            resident = [e for e in self._entries.values() if e.alive and e.loc == "device" and id(e) not in tried
                        and not self._rec.held(e.name)]
            if not resident:
                return
            e = min(resident, key=lambda x: x.last)
            tried.add(id(e))
            self._to_host(e)
            self._s["passive_evictions"] += 1

    # ------------------------------------------------------------------ mechanisms
    def _to_host(self, e):
        e.host, e.mapping = self.pool.take(e.nbytes)
        if self.cuda:
            self.stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.stream):
                e.host.copy_(e.dev, non_blocking=True)
            e.dev.record_stream(self.stream)
        else:
            e.host.copy_(e.dev)
        e.dev, e.loc = None, "host"
        self._host_bytes += e.nbytes
        self._s["swapped_out_bytes"] += e.nbytes

    def _to_device(self, e):
        self._host_bytes -= e.nbytes
        if self.cuda:
            self.stream.wait_stream(torch.cuda.current_stream())  # the block's last user has finished
            with torch.cuda.stream(self.stream):
                e.dev = torch.empty(e.nbytes, dtype=torch.uint8, device=e.device)
                e.dev.copy_(e.host, non_blocking=True)
                e.event = torch.cuda.Event()
                e.event.record(self.stream)
            e.loc = "in"
        else:
            e.dev = torch.empty(e.nbytes, dtype=torch.uint8)
            e.dev.copy_(e.host)
            e.host = e.mapping = None
            e.loc = "device"
        self._s["swapped_in_bytes"] += e.nbytes

    def _restore(self, e):
        """e's bytes on the device now: waited for, copied back (late), or recomputed."""
        if e.loc == "host":
            self._s["late"] += 1
            self._to_device(e)
        if e.loc == "in":
            torch.cuda.current_stream().wait_event(e.event)
            e.dev.record_stream(torch.cuda.current_stream())
            e.event = e.host = e.mapping = None
            e.loc = "device"
        elif e.loc == "dropped":
            t = self._storage_of(e.name, {})
            u8 = torch.empty(0, dtype=torch.uint8, device=t.device)
            u8.set_(t.untyped_storage())
            e.dev, e.loc = u8, "device"

    def _recomputable(self, name, seen):
        """Whether the storage `name` made can be made again: its op's recipe, each input a
        constant, a live tensor, a saved entry, or itself made again."""
        rec = self._rec
        if name in seen:
            return True
        seen.add(name)
        p = rec.producer.get(name)
        if p is None or p[0] >= len(rec.recipes) or rec.recipes[p[0]] is None:
            return False
        for _, n, version in rec.recipes[p[0]][2]:
            owner = rec.geometry[n][0] if n in rec.geometry else n
            w = rec.live.get(n)
            if n in rec.constants or (w is not None and w() is not None):
                continue
            e = self._entries.get(owner)
            if e is not None and e.alive and e.loc != "dropped":
                continue
            # Made again, it must be what the op read: no in-place write between its making and then.
            if rec.made_version.get(owner) != version or not self._recomputable(owner, seen):
                return False
        return True

    def _value(self, name, memo):
        """This step's tensor `name`: the live one, or rebuilt over its owner's bytes."""
        rec = self._rec
        if name in rec.constants:
            return rec.constants[name]
        w = rec.live.get(name)
        if w is not None and w() is not None:
            return w()
        owner, dtype, size, stride, offset = rec.geometry[name]
        return self._storage_of(owner, memo).view(dtype).as_strided(size, stride, offset)

    def _storage_of(self, owner, memo):
        """The bytes (uint8) of the storage `owner`'s op made: an entry's, or made again."""
        if owner in memo:
            return memo[owner]
        e = self._entries.get(owner)
        if e is not None and e.alive and e.loc != "dropped":
            self._restore(e)
            memo[owner] = e.dev
            return e.dev
        rec = self._rec
        k, j = rec.producer[owner]
        func, plain, slots, rng = rec.recipes[k]
        values = [None] * len(slots)
        for i, n, _ in slots:
            values[i] = self._value(n, memo)
        args, kwargs = fill(plain, values)
        state = None
        if rng is not None:
            state = self._rng_state()
            self._set_rng_state(rng)
        try:
            with torch.no_grad():
                out = func(*args, **kwargs)
        finally:
            if state is not None:
                self._set_rng_state(state)
        self._s["recomputed_ops"] += 1
        t = tensors_in(out)[j]
        u8 = torch.empty(0, dtype=torch.uint8, device=t.device)
        u8.set_(t.untyped_storage())
        memo[owner] = u8
        return u8
