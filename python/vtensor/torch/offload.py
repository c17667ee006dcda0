"""Activation offload for PyTorch 2: saved-tensor hooks driven by vtensor's planners.

    off = vtensor.torch.offload(policy="capuchin", budget="2GiB")
    for x, y in data:
        with off:                      # forward AND backward inside: one step
            loss_fn(model(x), y).backward()
        opt.step()

Every tensor autograd saves for backward goes through torch.autograd.graph.saved_tensors_hooks to
this object, which keeps it on the "device" or moves it to host memory. A saved tensor is the bytes
it reaches in its storage (views over the same bytes are one entry; a batch sliced from a preloaded
dataset is its slice), numbered in pack order, so step k+1's tensor i is step k's tensor i
(vtensor's stable tensor ids). policy="compress" is vtensor.torch.compress (lossless codecs).
  Step 1 (measured, Capuchin's passive mode): every pack and unpack is recorded with its time and
    bytes; when the device budget is full the least recently used entries go to host (passive
    eviction) and come back synchronously when unpacked.
  Then a plan, made once from the measured step:
    capuchin: Capuchin's planner (the C++ plan_capuchin, swap mode) on that trace: each pack and
      unpack is an op, op times are the measured gaps, the copy bandwidth is measured; it chooses
      which tensors to swap out after which op and where to prefetch them so the peak fits the
      budget and copies hide behind the measured compute. Recomputation, Capuchin's other half,
      is not available from hooks (a hook sees a tensor, not the op that made it).
    swap: vDNN's "all" policy: every saved tensor of at least min_bytes goes to host right after it
      is saved; each is prefetched when backward unpacks the one before it in the learned order.
  Guided steps run the plan's actions after their ops; the passive eviction stays on as a fallback
  (counted); a step whose pack/unpack sequence differs from the measured one goes on in passive
  mode from where it differs, and the plan is made again from it. stats() tells what each step did:
  "mode" is "measured", "guided" or "passive" (with "reason"), "planned_from" the step the plan in
  use came from. A backward run after `with off:` ended still restores every tensor (synchronously,
  with a warning: the plan's prefetches belong to the step).
The "device": on CUDA the tensors themselves (the budget counts resident bytes; swap-outs are
asynchronous copies into pinned host memory on a side stream, prefetches the reverse, the unpack
waits for the copy's event). On CPU torch the device is an arena of `budget` bytes sub-allocated by
vtensor's caching allocator: a kept tensor is copied into it, so its figures are real bytes of a
real allocator; on CPU the host copies are in the same memory, so the saving is not real there.
Values are copied bit for bit with their strides, so gradients are bit-identical.
Deviations from Capuchin: no recomputation (above; vtensor.torch.auto_checkpoint recomputes), and
the plan is made once: a late prefetch is counted (stats "late") but does not move the trigger in
the next step. The CUDA path is tested by python/tests/test_cuda.py where there is a GPU.
"""
import warnings
import time
import weakref

import torch

from vtensor import _vtensor
from vtensor.torch import _saved
from vtensor.torch._util import check_choice, check_nonnegative_int, parse_budget
from vtensor.torch.compress import Compress

POLICIES = ("capuchin", "swap", "compress")


def offload(policy="capuchin", budget=None, min_bytes=0, device=None):
    """A reusable context for training steps; see the module's note. budget: device bytes for saved
    tensors (an int, a float or a string such as '512MiB'; optional for 'compress'); min_bytes:
    smaller tensors are left alone; device: 'cpu' or 'cuda' (default: 'cuda' when available)."""
    check_choice(policy, POLICIES, "offload policy")
    if policy == "compress":
        if device is not None:
            check_choice(device, ("cpu", "cuda"), "device")
        return Compress(budget, min_bytes, device)
    return Offload(policy, budget, min_bytes, device)


class _Entry:
    __slots__ = ("id", "nbytes", "dtype", "loc", "block", "host", "dev", "event", "refs", "last", "alive",
                 "first_unpack")

    def __init__(self, eid, nbytes, dtype):
        self.id, self.nbytes, self.dtype = eid, nbytes, dtype
        self.loc = "device"       # device | host | in (prefetch in flight, CUDA)
        self.block = None         # arena offset (CPU)
        self.host = None          # host copy (uint8)
        self.dev = None           # the device bytes as a 1-D tensor of the storage's dtype
        self.event = None         # CUDA: the copy's event
        self.refs = 0             # packed handles alive
        self.last = 0             # op of the last access (LRU)
        self.alive = True
        self.first_unpack = None


class _ArenaStore:
    """CPU torch: the device is an arena of `budget` bytes, sub-allocated by vtensor's caching allocator."""

    def __init__(self, budget):
        self.arena = _vtensor.Arena(max(budget // 256 * 256, 256), "caching")  # blocks are 256-aligned: stay within
        self._mem = torch.empty(self.arena.capacity + 256, dtype=torch.uint8)
        self._base = (-self._mem.data_ptr()) % 256  # blocks 256-byte aligned in host memory too

    def _view(self, e):
        return self._mem[self._base + e.block:self._base + e.block + e.nbytes].view(e.dtype)

    def admit(self, e, src):  # src: the whole storage as a 1-D tensor; False: no room
        off = self.arena.try_allocate(e.nbytes, e.id)
        if off is None:
            return False
        e.block = off
        e.dev = self._view(e)
        e.dev.copy_(src)
        return True

    def to_host(self, e):
        e.host = torch.empty(e.nbytes, dtype=torch.uint8)
        e.host.copy_(e.dev.view(torch.uint8))
        self._free(e)

    def to_device(self, e):
        if not self.admit(e, e.host.view(e.dtype)):
            return False
        e.host = None
        return True

    def ready(self, e):
        pass

    def _free(self, e):
        if e.block is not None:
            self.arena.free(e.block)
            e.block, e.dev = None, None

    def free(self, e):
        self._free(e)
        e.host = None

    def resident(self):
        return self.arena.stats()["allocated_bytes"]

    def stats(self):
        return self.arena.stats()

    def reset_peak(self):
        self.arena.reset_peak()


class _CudaStore:
    """CUDA: kept tensors stay where they are; copies run on a side stream into pinned memory.
    Not run in this build's tests (no GPU)."""

    def __init__(self, budget):
        self.budget = budget
        self.stream = torch.cuda.Stream()
        self.bytes = 0
        self.peak = 0

    def _count(self, n):
        self.bytes += n
        self.peak = max(self.peak, self.bytes)

    def admit(self, e, src):
        if self.bytes + e.nbytes > self.budget:
            return False
        e.dev = src  # no copy: the storage itself
        self._count(e.nbytes)
        return True

    def to_host(self, e):
        cur = torch.cuda.current_stream()
        e.host = torch.empty(e.nbytes, dtype=torch.uint8, pin_memory=True)
        self.stream.wait_stream(cur)
        with torch.cuda.stream(self.stream):
            e.host.copy_(e.dev.view(torch.uint8), non_blocking=True)
        e.dev.record_stream(self.stream)  # its block is not reused before the copy ends
        e.dev = None
        self._count(-e.nbytes)

    def to_device(self, e):
        if self.bytes + e.nbytes > self.budget:
            return False
        with torch.cuda.stream(self.stream):
            e.dev = torch.empty(e.nbytes, dtype=torch.uint8, device="cuda")
            e.dev.copy_(e.host, non_blocking=True)
            e.event = torch.cuda.Event()
            e.event.record(self.stream)
        e.dev = e.dev.view(e.dtype)
        self._count(e.nbytes)
        return True

    def ready(self, e):
        if e.event is not None:
            torch.cuda.current_stream().wait_event(e.event)
            e.dev.record_stream(torch.cuda.current_stream())
            e.event = None
            e.host = None

    def free(self, e):
        if e.dev is not None:
            self._count(-e.nbytes)
        e.dev, e.host, e.event = None, None, None

    def resident(self):
        return self.bytes

    def stats(self):
        return {"allocated_bytes": self.bytes, "peak_allocated_bytes": self.peak, "capacity_bytes": self.budget}

    def reset_peak(self):
        self.peak = self.bytes


class Offload:
    def __init__(self, policy="capuchin", budget=None, min_bytes=0, device=None):
        check_choice(policy, ("capuchin", "swap"), "offload policy")
        self.policy = policy
        self.budget = parse_budget(budget)
        self.min_bytes = check_nonnegative_int(min_bytes, "min_bytes")
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        check_choice(device, ("cpu", "cuda"), "device")
        if device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device 'cuda' is not available in this torch; accepted here: 'cpu'")
        self.device = device
        self.store = _CudaStore(self.budget) if device == "cuda" else _ArenaStore(self.budget)
        self.plan = None            # {op: [(kind, entry id)]}, from the measured step
        self.plan_info = None
        self.planned_from = None    # the step the plan was made from
        self.measured = None        # the measured step's sequence [(kind, id, nbytes)]
        self.history = []           # stats() per step
        self.swap_ns_per_byte = self._measure_copy()
        self._hooks = None
        self._step = None

    # ---------------------------------------------------------------- a step
    def __enter__(self):
        if self._hooks is not None:
            raise RuntimeError("this offload context is already active (one step at a time)")
        self._begin_step()
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)
        self._hooks = None
        self._end_step(failed=exc[0] is not None)
        return False

    def stats(self):
        """The last step's figures (see history for every step)."""
        return dict(self.history[-1]) if self.history else {}

    def _begin_step(self):
        guided = self.plan is not None
        self.store.reset_peak()
        self._step = {
            "step": len(self.history) + 1, "mode": "guided" if guided else "measured", "policy": self.policy,
            "budget": self.budget, "entries": 0, "saved_bytes": 0, "live_saved_bytes": 0, "peak_saved_bytes": 0,
            "planned_swap_outs": 0, "prefetches": 0, "passive_evictions": 0, "late": 0, "swapped_out_bytes": 0,
            "swapped_in_bytes": 0, "skipped_tensors": 0, "sequence_changed": False, "reason": None,
            "planned_from": self.planned_from, "unpacks_after_step": 0,
        }
        self._warned_outside = False
        self._t0 = time.perf_counter_ns()
        self._events = []           # (kind 'w'|'r', entry id, nbytes, time ns)
        self._entries = []
        self._by_key = {}           # (storage ptr, version) -> (weakref to a tensor of it, entry)
        self._on_plan = guided

    def _end_step(self, failed=False):
        s = self._step
        st = self.store.stats()
        s["peak_device_bytes"] = st["peak_allocated_bytes"]
        s["failed"] = failed
        if s["mode"] == "guided" and not s["sequence_changed"] and len(self._events) != len(self.measured):
            self._diverged(f"the step made {len(self._events)} saved-tensor accesses where the measured one made "
                           f"{len(self.measured)}")
        if failed:
            s["reason"] = s["reason"] or "an exception ended the step: the plan is kept as it was"
        elif self.plan is None or s["sequence_changed"]:
            self._make_plan()
            self.planned_from = s["step"]
            s["plan"] = dict(self.plan_info)
        self.history.append(s)

    # ---------------------------------------------------------------- hooks
    def _op(self, kind, e):
        self._events.append((kind, e.id, e.nbytes, time.perf_counter_ns() - self._t0))
        k = len(self._events) - 1
        e.last = k
        if self._on_plan:
            m = self.measured
            if k >= len(m) or m[k][:3] != self._events[k][:3]:
                self._diverged(f"saved-tensor access {k} differs from the measured step's (new shapes or a "
                               f"different graph)")
        return k

    def _diverged(self, why):
        """A different step: passive from here, and the plan is made again from this step."""
        self._on_plan = False
        s = self._step
        s["sequence_changed"] = True
        s["mode"] = "passive"
        s["reason"] = why + "; passive from there, planned again from this step"

    def _pack(self, t):
        if not isinstance(t, torch.Tensor) or t.layout != torch.strided or t.device.type != self.device:
            self._step["skipped_tensors"] += 1
            return ("raw", t)
        if _saved.is_parameter(t):  # a parameter: it stays anyway
            self._step["skipped_tensors"] += 1
            return ("raw", t)
        full, start = _saved.region(t)
        nbytes = full.numel() * full.element_size()
        if nbytes < max(self.min_bytes, 1):
            self._step["skipped_tensors"] += 1
            return ("raw", t)
        key = _saved.key(t, start, full.numel())
        hit = self._by_key.get(key)
        e = hit[1] if hit is not None and hit[0]() is not None and hit[1].alive else None
        if e is None:
            e = _Entry(len(self._entries), nbytes, t.dtype)
            self._entries.append(e)
            self._by_key[key] = (weakref.ref(t), e)
            s = self._step
            s["entries"] += 1
            s["saved_bytes"] += nbytes
            s["live_saved_bytes"] += nbytes
            s["peak_saved_bytes"] = max(s["peak_saved_bytes"], s["live_saved_bytes"])
            while not self.store.admit(e, full.detach()):
                if not self._evict_one(exclude=e):
                    raise _vtensor.OutOfMemoryError(self._oom_text(nbytes))
        h = _saved.Handle(self, e, _saved.View(t, start))
        k = self._op("w", e)
        self._run_actions(k)
        return ("v", h)

    def _unpack(self, packed):
        kind, obj = packed
        if kind == "raw":
            return obj
        e = obj.entry
        if self._hooks is None:  # backward after the step's `with` ended
            self._step["unpacks_after_step"] += 1
            if not self._warned_outside:
                self._warned_outside = True
                warnings.warn("vtensor offload: backward ran outside `with off:`; saved tensors are restored on demand "
                              "and the plan's prefetches are not used. Run forward and backward inside one `with off:`.",
                              stacklevel=2)
            if e.loc == "host":
                self._swap_in(e, passive=True)
            self.store.ready(e)
            return obj.view.of(e.dev)
        k = self._op("r", e)
        if e.first_unpack is None:
            e.first_unpack = k
        if e.loc == "host":  # not prefetched (passive mode, or late): bring it back now
            self._step["late"] += 1
            self._swap_in(e, passive=True)
        self.store.ready(e)
        v = obj.view.of(e.dev)
        self._run_actions(k)
        return v

    def _release(self, e):
        if not e.alive:
            return
        e.alive = False
        self.store.free(e)
        e.loc = "gone"
        if self._step is not None:
            self._step["live_saved_bytes"] -= e.nbytes

    # ---------------------------------------------------------------- moves
    def _swap_out(self, e):
        self.store.to_host(e)
        e.loc = "host"
        self._step["swapped_out_bytes"] += e.nbytes

    def _swap_in(self, e, passive):
        while not self.store.to_device(e):
            if not passive:
                return False  # a prefetch with no room waits for the access
            if not self._evict_one(exclude=e):
                raise _vtensor.OutOfMemoryError(self._oom_text(e.nbytes))
        e.loc = "device"
        self._step["swapped_in_bytes"] += e.nbytes
        return True

    def _evict_one(self, exclude):
        """Passive eviction: the resident entry used least recently goes to host."""
        victims = [x for x in self._entries if x.alive and x.loc == "device" and x is not exclude and x.dev is not None]
        if not victims:
            return False
        v = min(victims, key=lambda x: x.last)
        self._swap_out(v)
        self._step["passive_evictions"] += 1
        return True

    def _oom_text(self, nbytes):
        if isinstance(self.store, _ArenaStore):
            return self.store.arena.oom_message(nbytes) + " (saved tensors of the offload context)"
        return (f"out of device memory: requested {_vtensor.format_bytes(nbytes)} for a saved tensor with "
                f"{_vtensor.format_bytes(self.store.resident())} of saved tensors resident in a "
                f"{_vtensor.format_bytes(self.budget)} budget")

    def _run_actions(self, k):
        if not self._on_plan:
            return
        for kind, eid in self.plan.get(k, ()):
            e = self._entries[eid] if eid < len(self._entries) else None
            if e is None or not e.alive:
                continue
            if kind == "swap_out" and e.loc == "device":
                self._swap_out(e)
                self._step["planned_swap_outs"] += 1
            elif kind == "prefetch" and e.loc == "host":
                if self._swap_in(e, passive=False):
                    self._step["prefetches"] += 1

    # ---------------------------------------------------------------- planning
    def _measure_copy(self):
        """Host<->device copy time per byte, measured on 8 MiB."""
        n = 8 << 20
        src = torch.empty(n, dtype=torch.uint8, device=self.device)
        dst = torch.empty(n, dtype=torch.uint8, pin_memory=self.device == "cuda")
        dst.copy_(src)
        if self.device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter_ns()
        for _ in range(3):
            dst.copy_(src)
        if self.device == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter_ns() - t) / (3 * n)

    def _make_plan(self):
        ev = self._events
        self.measured = [x[:3] for x in ev]
        n = len(ev)
        nbytes = [e.nbytes for e in self._entries]
        plan, info = {}, {"ops": n, "tensors": len(nbytes)}
        if self.policy == "capuchin":
            times = [x[3] for x in ev]
            op_ns = [float(times[k + 1] - times[k]) for k in range(n - 1)] + [0.0] if n else []
            accesses = [(eid, k, kind == "w", times[k]) for k, (kind, eid, _, _) in enumerate(ev)]
            small = set(i for i, b in enumerate(nbytes) if b < self.min_bytes)
            # Block sizes as the arena allocates them (256-byte aligned), so a plan that fits fits the arena.
            blocks = [(b + 255) // 256 * 256 for b in nbytes]
            r = _vtensor.capuchin_swap_plan(blocks, accesses, op_ns, self.swap_ns_per_byte, self.budget // 256 * 256)
            for kind, eid, op, _free_after in r["actions"]:
                if eid in small:
                    continue
                plan.setdefault(op, []).append((kind, eid))
            info.update(planner="capuchin (swap)", fits=r["fits"], predicted_peak_before=r["peak_before"],
                        predicted_peak_after=r["peak_after"], swaps=r["swaps"], candidates=r["candidates"])
        else:
            first_read = {}
            for k, (kind, eid, _, _) in enumerate(ev):
                if kind == "r" and eid not in first_read:
                    first_read[eid] = k
            packed_at = {}
            for k, (kind, eid, _, _) in enumerate(ev):
                if kind == "w" and eid not in packed_at:
                    packed_at[eid] = k
            swaps = 0
            reads = sorted(first_read.values())
            for eid, b in first_read.items():
                w = packed_at[eid]
                if b <= w + 1:
                    continue  # read right after it is saved: nothing to gain
                plan.setdefault(w, []).append(("swap_out", eid))
                # Prefetch one ahead: at the previous first unpack in backward order, else at the last op before b.
                i = reads.index(b)
                trigger = reads[i - 1] if i > 0 and reads[i - 1] > w else b - 1
                plan.setdefault(trigger, []).append(("prefetch", eid))
                swaps += 1
            info.update(planner="vdnn-all (swap every saved tensor, prefetch one ahead)", swaps=swaps)
        info["actions"] = sum(len(v) for v in plan.values())
        self.plan, self.plan_info = plan, info
