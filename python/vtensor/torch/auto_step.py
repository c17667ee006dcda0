"""vtensor's planner `auto` for a PyTorch training step: each tensor autograd saves is kept,
offloaded to host memory and prefetched back, or dropped and recomputed, as the C++ planner
decides for a budget on the step's real peak.

    step = vtensor.torch.auto(model, budget="6GiB", optimizer=opt)
    for x, y in loader:
        with step:                     # forward AND backward inside: one step
            loss_fn(model(x), y).backward()
        opt.step(); opt.zero_grad()
    print(step.stats())

Step 1 is measured and runs as plain PyTorch does (it needs the plain step's peak): every aten op
runs under the recorder of vtensor.torch.record (a TorchDispatchMode), which writes the step as the
operator log `vtensor replay --trace` reads, with a SAVED line for each storage autograd saves (the
saved-tensor hooks see them). The plan is the C++ runtime's: the log is replayed on the sim
backend under policy `auto` (the same planner as `vtensor train --policy auto`: measured op
times, the copy bandwidth measured here) within the budget less what the step does not touch
(optimizer state); only the saved storages may move there (the others are pinned: Python or
autograd's engine holds them, out of the hooks' reach). The last replayed iteration's moves (swap
out, prefetch, drop, each at the op boundary it happened at, planned or evicted) are the plan.
Guided steps follow it:
  offload: the storage's bytes go to host memory (CUDA: pinned, on a side stream; CPU: an
    anonymous mapping outside malloc's heap, so that the device's count falls) and come back at
    the prefetch's op, or on demand when backward unpacks them first (counted "late");
  recompute: the storage is let go, and when backward unpacks it the aten op that made it runs
    again on its inputs (saved tensors, parameters, or themselves recomputed), with the RNG state
    that op saw, so the values are bit for bit the ones it made.
The device's bytes are torch's: torch.cuda.memory_allocated, or on CPU what the step's tensors
held when it began (parameters, buffers, gradients, optimizer state) plus malloc's bytes in use
since (vtensor.torch.memory). Before each op, where they and the op's outputs in the measured
step would pass the budget, the saved tensors used least recently go to host (passive eviction,
counted), so that a plan the sim costed a little differently still holds the budget at op
boundaries; a guided step whose peak still passed the budget has its plan made again for a sim
budget lowered by the overshoot (at most three times: Capuchin's feedback, on the peak). A step
whose ops differ from the measured one's (new shapes) follows no plan from where it differs, and
the next such step is measured again; a plan is kept per kind of step (whether gradients exist when it starts: gradient accumulation's first and later micro-batches).
Deviations from the C++ runtime: moves happen at op boundaries as torch runs them (a saved tensor
is packed after its op returns, so a move planned right after an op waits for the next one);
compression is not planned (the log holds no densities); the measured step is not budgeted.
"""
import json
import mmap
import os
import tempfile
import time
import weakref

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from vtensor import _vtensor
from vtensor.torch import _saved
from vtensor.torch._util import check_module, parse_budget
from vtensor.torch.memory import PeakMeter, malloc_in_use
from vtensor.torch.record import _Recorder

# The C++ policies whose moves a step can follow: auto, and the others for comparison (not the
# compress policies: the log holds no densities; not unified memory's pages).
POLICIES = ("auto", "capuchin", "capuchin-swap", "capuchin-recompute", "checkpoint", "dtr", "lru", "lru-recompute",
            "vdnn-all", "vdnn-conv", "zero-overhead-swap-limit")


def auto(model, budget, optimizer=None, policy="auto", device=None, gpu="h100-80g", options=None, log=None):
    """A reusable context for training steps; see the module's note. budget: the step's device
    bytes (an int or a string such as '6GiB'); optimizer: its state counts toward the budget (the
    floor checked before the first step); policy: the C++ policy that plans (auto, or another for
    comparison); gpu: the sim GPU whose cost model prices what the log does not time; options:
    the policy's own options, as the CLI spells them without dashes ({'auto-search': '64'});
    log: where each measured step's operator log is kept (`vtensor replay --trace LOG` replays it
    under any policy; a second kind of step's as LOG-2, ...)."""
    return AutoStep(model, budget, optimizer, policy, device, gpu, options, log)


class StepPeak:
    """The peak device bytes of a step (forward and backward) as auto counts them; the plain
    step's, measured this way, is what a budget such as half of it refers to:
        with vtensor.torch.StepPeak(model, opt) as m:
            loss_fn(model(x), y).backward()
        m.peak_bytes
    On CUDA torch.cuda.max_memory_allocated; on CPU the bytes of the parameters, buffers, gradients
    and optimizer state when the step begins, plus the most malloc held above that at an op
    boundary (vtensor.torch.memory)."""

    def __init__(self, model, optimizer=None, device=None):
        check_module(model)
        if device is None:
            ps = list(model.parameters())
            device = "cuda" if ps and ps[0].is_cuda else "cpu"
        self.model, self.optimizer, self.device = model, optimizer, device
        self.peak_bytes = 0

    def __enter__(self):
        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        else:
            self._start = sum(t.untyped_storage().nbytes() for t in _start_tensors(self.model, self.optimizer, "cpu"))
            self._meter = PeakMeter("cpu").__enter__()
        return self

    def __exit__(self, *exc):
        if self.device == "cuda":
            torch.cuda.synchronize()
            self.peak_bytes = torch.cuda.max_memory_allocated()
        else:
            self._meter.__exit__(*exc)
            self.peak_bytes = self._start + self._meter.peak_bytes
        return False


def _start_tensors(model, optimizer, device):
    """What the device holds when a step begins: parameters, buffers, gradients, optimizer state."""
    ts = list(model.parameters()) + list(model.buffers())
    ts += [p.grad for p in model.parameters() if p.grad is not None]
    if optimizer is not None:
        for st in optimizer.state.values():
            ts += [v for v in st.values() if isinstance(v, torch.Tensor)]
    seen, out = set(), []
    for t in ts:
        if t.device.type == device and _storage_key(t) not in seen:
            seen.add(_storage_key(t))
            out.append(t)
    return out


def _storage_key(t):
    return t.untyped_storage().data_ptr()


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
    """What autograd holds for a saved tensor: its entry (counted) and its geometry."""
    __slots__ = ("owner", "entry", "dtype", "size", "stride", "offset", "__weakref__")

    def __init__(self, owner, entry, t):
        self.owner, self.entry = owner, entry
        self.dtype, self.size, self.stride, self.offset = t.dtype, tuple(t.size()), tuple(t.stride()), t.storage_offset()
        entry.refs += 1

    def __del__(self):
        self.entry.refs -= 1
        if self.entry.refs == 0:
            self.owner._release(self.entry)


class _Paused:
    """The recorder ignores the ops the step's own mechanisms dispatch (copies, views)."""

    def __init__(self, rec):
        self.rec = rec

    def __enter__(self):
        self.was, self.rec.paused = self.rec.paused, True

    def __exit__(self, *exc):
        self.rec.paused = self.was
        return False


class _StepRecorder(_Recorder):
    """The recorder of vtensor.torch.record, naming every tensor the same way in every step, with
    what a guided step needs: each forward op's recipe (to recompute its results), each name's
    storage owner and geometry, and the step's hooks at each op boundary."""

    def __init__(self, out, sync, step, recipes):
        super().__init__(out, sync)
        self.step, self.keep_recipes = step, recipes
        self.owner = {}        # storage ptr -> the name of the tensor whose op made that storage
        self.producer = {}     # name of a storage's maker -> (op index, result index)
        self.geometry = {}     # name -> (owner name, dtype, size, stride, storage offset)
        self.recipes = []      # per forward op: (func, plain args, spec, [(slot, name)], rng state) or None
        self.live = {}         # name -> weakref to this step's tensor
        self.constants = {}    # name -> tensor (held for the step: a recomputation may read it)
        self.op_names = []
        self.saved = set()     # owners autograd saved (the log's SAVED lines)
        self.made = []         # per op, the bytes of the storages it made
        self.made_version = {} # name of a storage's maker -> its version then (a later in-place write bumps it)
        self.names_of = {}     # owner -> the names over its storage
        self.paused = False
        self.backward_at = None

    def emit(self, **rec):
        if self.out is not None:
            super().emit(**rec)

    def constant(self, t):
        name = super().constant(t)
        self.constants[name] = t
        self.owner.setdefault(_storage_key(t), name)
        self._note(name, t)
        return name

    def _note(self, name, t):
        self.live[name] = weakref.ref(t)
        owner = self.owner.get(_storage_key(t), name)
        self.geometry[name] = (owner, t.dtype, tuple(t.size()), tuple(t.stride()), t.storage_offset())
        self.names_of.setdefault(owner, []).append(name)

    def held(self, owner):
        """Whether a tensor of this step over `owner`'s storage is alive (Python, or backward's
        own use of an unpacked one, holds it): moving the storage would free nothing."""
        return any(self.live[n]() is not None for n in self.names_of.get(owner, ()) if n in self.live)

    def adopt(self, t, name):
        """t (a tensor the step rebuilt from saved bytes) goes by the name its original had."""
        self.names[id(t)] = (weakref.ref(t), name)
        self.live[name] = weakref.ref(t)
        owner = self.geometry[name][0] if name in self.geometry else name
        if name not in self.names_of.setdefault(owner, []):
            self.names_of[owner].append(name)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.paused:
            return func(*args, **kwargs)
        k = self.ops
        if self.backward_at is None and torch._C._current_graph_task_id() >= 0:
            self.backward_at = k
            self.flush()
            self.emit(ANNOTATION="BACKWARD", INSTRUCTION="ANNOTATE")
        with _Paused(self):
            self.step._before_op(k)
        forward = self.backward_at is None
        rng = self.step._rng_state() if forward and torch.Tag.nondeterministic_seeded in func.tags else None
        inputs = {_storage_key(a) for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)}
        known = {id(r) for r in tree_flatten((args, kwargs))[0] if isinstance(r, torch.Tensor)}
        out = super().__torch_dispatch__(func, types, args, kwargs)
        results = [r for r in tree_flatten(out)[0] if isinstance(r, torch.Tensor)]
        self.op_names.append((str(func), tuple(tuple(r.shape) for r in results)))
        made = 0
        for j, r in enumerate(results):
            name = self.name_of(r)
            if name is None or id(r) in known:
                continue
            if _storage_key(r) not in inputs:  # new bytes: this op made the storage
                self.owner[_storage_key(r)] = name
                self.producer[name] = (k, j)
                self.made_version[name] = r._version
                made += r.untyped_storage().nbytes()
            self._note(name, r)
        self.made.append(made)
        if forward and self.keep_recipes:
            self.recipes.append(self._recipe(func, args, kwargs, rng))
        with _Paused(self):
            self.step._after_op(k)
        return out

    def _recipe(self, func, args, kwargs, rng):
        if any(a.alias_info is not None and a.alias_info.is_write for a in func._schema.arguments):
            return None  # it writes an input (batch norm's running statistics): run once only
        flat, spec = tree_flatten((args, kwargs))
        slots = [(i, self.name_of(a), a._version) for i, a in enumerate(flat) if isinstance(a, torch.Tensor)]
        if any(n is None for _, n, _ in slots):
            return None
        return func, [None if isinstance(a, torch.Tensor) else a for a in flat], spec, slots, rng


class AutoStep:
    def __init__(self, model, budget, optimizer=None, policy="auto", device=None, gpu="h100-80g", options=None,
                 log=None):
        check_module(model)
        if log is not None and (not isinstance(log, (str, os.PathLike))
                                or not os.path.isdir(os.path.dirname(os.path.abspath(log)))):
            raise ValueError(f"log must name a file in an existing folder, got {log!r}")
        self.log = log
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}; accepted: {', '.join(POLICIES)}")
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise ValueError(f"optimizer must be a torch.optim.Optimizer or None, got {type(optimizer).__name__}")
        if options is not None and not (isinstance(options, dict) and all(isinstance(k, str) for k in options)):
            raise ValueError("options must be a dict of the policy's option names (no dashes) to values")
        self.model, self.optimizer, self.policy, self.gpu = model, optimizer, policy, gpu
        self.options = {k: str(v) for k, v in (options or {}).items()}
        self.budget = parse_budget(budget)
        params = list(model.parameters())
        if device is None:
            device = "cuda" if params and params[0].is_cuda else "cpu"
        if device not in ("cpu", "cuda"):
            raise ValueError(f"unknown device {device!r}; accepted: 'cpu', 'cuda'")
        if device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device 'cuda' is not available in this torch; accepted here: 'cpu'")
        self.device, self.cuda = device, device == "cuda"
        self.floor = self._floor()
        if self.budget < self.floor:
            raise ValueError(f"budget {_vtensor.format_bytes(self.budget)} is below what the step's parameters, "
                             f"gradients and optimizer state need: {_vtensor.format_bytes(self.floor)}; accepted: "
                             f"a budget of at least that")
        # CPU: malloc's count includes the Python objects the step makes meanwhile (this module's
        # bookkeeping among them); the plan and the passive eviction leave this much for them.
        self.slack = 0 if self.cuda else 64 << 10
        self.pool = _HostPool(self.cuda)
        self.stream = torch.cuda.Stream() if self.cuda else None
        self.plans = {}           # the step's state at its start (which gradients exist) -> its plan
        self.history = []
        self._active = None
        self.link_gbps = self._measure_link()

    # ------------------------------------------------------------------ what the device holds
    def _start_tensors(self):
        return _start_tensors(self.model, self.optimizer, self.device)

    def _floor(self):
        """Parameters, buffers, their gradients and the optimizer's state, as the step needs them."""
        held = sum(t.untyped_storage().nbytes() for t in self._start_tensors())
        grads = sum(p.untyped_storage().nbytes() for p in self.model.parameters() if p.requires_grad and p.grad is None)
        return held + grads + self._state_to_come()

    def _state_to_come(self):
        """The optimizer state its first step will make (Adam's two moments, SGD's momentum): it is
        not there before, and the budget must hold it after."""
        if self.optimizer is None or self.optimizer.state:
            return 0
        per = {"Adam": 2, "AdamW": 2, "RMSprop": 1, "Adagrad": 1}.get(type(self.optimizer).__name__, 0)
        if isinstance(self.optimizer, torch.optim.SGD):
            per = 1 if any(g.get("momentum", 0) for g in self.optimizer.param_groups) else 0
        return per * sum(p.untyped_storage().nbytes() for p in self.model.parameters() if p.requires_grad)

    def _device_bytes(self):
        if self.cuda:
            return torch.cuda.memory_allocated()
        return self._start_bytes + malloc_in_use() - self._malloc0

    def _measure_link(self):
        """Host<->device copy speed in bytes per ns (GB/s), on 8 MiB (CPU: into the host pool)."""
        n = 8 << 20
        src = torch.empty(n, dtype=torch.uint8, device=self.device)
        dst, _m = self.pool.take(n)
        dst.copy_(src)
        if self.cuda:
            torch.cuda.synchronize()
        t = time.perf_counter_ns()
        for _ in range(3):
            dst.copy_(src)
        if self.cuda:
            torch.cuda.synchronize()
        return 3 * n / max(time.perf_counter_ns() - t, 1)

    def _rng_state(self):
        return torch.cuda.get_rng_state() if self.cuda else torch.get_rng_state()

    def _set_rng_state(self, s):
        (torch.cuda.set_rng_state if self.cuda else torch.set_rng_state)(s)

    # ------------------------------------------------------------------ a step
    def __enter__(self):
        if self._active is not None:
            raise RuntimeError("this auto context is already active (one step at a time)")
        self._key = tuple(p.grad is not None for p in self.model.parameters())
        self._plan = self.plans.get(self._key)
        measuring = self._plan is None
        self._s = {"step": len(self.history) + 1, "mode": "measured" if measuring else "guided", "policy": self.policy,
                   "budget": self.budget, "swapped_out_bytes": 0, "swapped_in_bytes": 0, "recomputed_ops": 0,
                   "late": 0, "passive_evictions": 0, "moves_made": 0, "moves_unreachable": 0, "moves_held": 0,
                   "saved_bytes": 0,
                   "planned_from": None if measuring else self._plan["info"]["planned_from"], "reason": None}
        self._entries = {}      # storage owner's name -> _Entry (this step's)
        self._clock = 0
        self._on_plan = not measuring
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        start = self._at_start = self._start_tensors()  # (the step's own gradients are not among them)
        self._start_bytes = sum(t.untyped_storage().nbytes() for t in start)
        self._start_keys = {_storage_key(t) for t in start}
        self._malloc0 = 0 if self.cuda else malloc_in_use()
        self._peak, self._peak_op = self._device_bytes(), 0
        self._log, out = None, None
        if measuring:
            fd, self._log = tempfile.mkstemp(prefix="vtensor-step-", suffix=".log")
            out = os.fdopen(fd, "w")
        self._rec = _StepRecorder(out, self.cuda and measuring, self, recipes=not measuring)
        self._rec.emit(ANNOTATION="START", INSTRUCTION="ANNOTATE")
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._t0 = time.perf_counter()
        self._hooks.__enter__()
        self._rec.__enter__()
        self._active = True
        return self

    def __exit__(self, *exc):
        rec, s = self._rec, self._s
        rec.__exit__(*exc)
        self._hooks.__exit__(*exc)
        self._active = None
        if self.cuda:
            torch.cuda.synchronize()
            self._peak = max(self._peak, torch.cuda.max_memory_allocated())
        else:
            self._sample()
        s.update(time_ms=(time.perf_counter() - self._t0) * 1e3, peak_bytes=self._peak, peak_op=self._peak_op, ops=rec.ops)
        try:
            if self._log is not None:
                rec.flush()
                rec.out.close()
                if exc[0] is None:
                    self._make_plan(rec, s)
            elif exc[0] is None and self._on_plan and rec.op_names != self._plan["ops"]:
                self._diverged(f"the step ran {rec.ops} ops where the measured one ran {len(self._plan['ops'])}")
            elif exc[0] is None and self._on_plan:
                self._correct(s)
        finally:
            if self._log is not None and os.path.exists(self._log):
                os.remove(self._log)
        self._rec = None
        self.history.append(s)
        return False

    def stats(self):
        """The last step's figures (history holds every step's)."""
        return dict(self.history[-1]) if self.history else {}

    def _diverged(self, why):
        self._on_plan = False
        self.plans.pop(self._key, None)
        self._s["reason"] = why + ": no plan followed from there; the next such step is measured again"

    # ------------------------------------------------------------------ planning
    def _make_plan(self, rec, s):
        traced = {_storage_key(c) for c in rec.constants.values()}
        held = sum(t.untyped_storage().nbytes() for t in self._at_start if _storage_key(t) not in traced)
        untraced = held + self._state_to_come()
        sim_budget = self._sim_budget(rec, s["peak_bytes"] - held, untraced)
        if sim_budget <= 0:
            raise ValueError(f"budget {_vtensor.format_bytes(self.budget)} leaves nothing for the step beside the "
                             f"{_vtensor.format_bytes(untraced)} it does not touch (optimizer state)")
        with open(self._log) as f:
            log = f.read()
        if self.log is not None:  # whole or not at all
            path = str(self.log) if not self.plans else f"{self.log}-{len(self.plans) + 1}"
            with open(path + ".tmp", "w") as f:
                f.write(log)
            os.replace(path + ".tmp", path)
        t = time.perf_counter()
        r = self._solve(self._log, sim_budget, untraced)
        info = {"policy": self.policy, "summary": r["summary"], "ops": r["num_ops"], "moves": len(r["moves"]),
                "predicted_ms": r["iteration_ms"][-1], "predicted_peak_bytes": r["peak_bytes"][-1] + untraced,
                "sim_budget_bytes": sim_budget, "untraced_bytes": untraced, "sim_bytes_per_real_byte": self._sim_ratio,
                "planning_s": time.perf_counter() - t, "link_gbps": self.link_gbps, "planned_from": s["step"],
                "corrections": 0}
        self.plans[self._key] = {"moves": self._moves_of(r), "ops": list(rec.op_names), "made": list(rec.made),
                                 "info": info, "report": r["report"], "log": log}
        s["plan"] = dict(info)

    @staticmethod
    def _moves_of(r):
        moves = {}
        for point, kind, name, _planned in r["moves"]:
            moves.setdefault(point, []).append((kind, name))
        return moves

    def _solve(self, log_path, sim_budget, untraced):
        """The C++ policy's plan of the log within `sim_budget`; an OutOfMemoryError naming the
        lowest budget a plan holds where none holds this one."""
        spec = {"name": "torch-step", "base": self.gpu, "h2d_gbps": self.link_gbps, "d2h_gbps": self.link_gbps,
                "link_efficiency": 1}
        fd, gpu_file = tempfile.mkstemp(prefix="vtensor-gpu-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(spec, f)
        try:
            return _vtensor.plan_step(log_path, sim_budget, self.policy, "torch-step", gpu_file, 3, self.options)
        except _vtensor.OutOfMemoryError as e:
            lowest = int(self._lowest_budget(log_path, gpu_file, sim_budget) / min(self._sim_ratio, 1.0)) + untraced + 1
            err = _vtensor.OutOfMemoryError(
                f"vtensor auto: no plan holds this step in a budget of {_vtensor.format_bytes(self.budget)}: what "
                f"the hooks cannot move (tensors autograd does not save, and each op's own working set) needs "
                f"more; the lowest budget a plan held in the sim is about {_vtensor.format_bytes(lowest)} "
                f"({lowest} bytes). The planner said: {e}")
            err.lowest_budget = lowest  # bytes
            raise err from None
        finally:
            os.remove(gpu_file)

    def _correct(self, s):
        """Feedback (Capuchin's, on the peak): a guided step whose measured peak passed the budget has
        its plan made again for a sim budget lowered by the overshoot, at most three times."""
        plan = self._plan
        info = plan["info"]
        if s["peak_bytes"] <= self.budget:
            return
        if info["corrections"] >= 3:
            s["reason"] = (f"the peak passed the budget by {_vtensor.format_bytes(s['peak_bytes'] - self.budget)} "
                           f"after {info['corrections']} corrections of the plan: what the hooks cannot move needs more")
            return
        u = info["untraced_bytes"]
        sim_budget = int(info["sim_budget_bytes"] * (self.budget - u) / max(s["peak_bytes"] - u, 1) * 0.995)
        fd, path = tempfile.mkstemp(prefix="vtensor-step-", suffix=".log")
        with os.fdopen(fd, "w") as f:
            f.write(plan["log"])
        try:
            r = self._solve(path, sim_budget, u)
        except _vtensor.OutOfMemoryError as e:
            s["reason"] = (f"the peak passed the budget by {_vtensor.format_bytes(s['peak_bytes'] - self.budget)}; no "
                           f"tighter plan: {e}")
            info["corrections"] = 3
            return
        finally:
            os.remove(path)
        plan["moves"] = self._moves_of(r)
        info.update(corrections=info["corrections"] + 1, sim_budget_bytes=sim_budget, moves=len(r["moves"]),
                    predicted_ms=r["iteration_ms"][-1], predicted_peak_bytes=r["peak_bytes"][-1] + u,
                    summary=r["summary"])
        s["replanned"] = dict(info)

    def _sim_budget(self, rec, real_peak, untraced):
        """The budget for the sim's replay of the log: the step's less what it does not touch
        (`untraced`), scaled by the sim's bytes per real byte of what the log holds at the measured
        step's peak (`real_peak`: malloc's own overhead and the like are real bytes no log line
        has), never above the step's less untraced."""
        plain = self.budget - untraced - self.slack
        fd, gpu_file = tempfile.mkstemp(prefix="vtensor-gpu-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump({"name": "torch-step", "base": self.gpu}, f)
        try:
            sim_peak = _vtensor.plan_step(self._log, 1 << 50, "none", "torch-step", gpu_file, 2, {})["peak_bytes"][-1]
        finally:
            os.remove(gpu_file)
        self._sim_ratio = sim_peak / max(real_peak, 1)
        return min(plain, int(plain * self._sim_ratio))

    def _lowest_budget(self, log_path, gpu_file, start):
        """The smallest sim budget the passive policy (lru: any movable tensor out on demand) holds the
        measured step in, by bisection from `start` (which did not) up to the unmanaged peak."""
        hi = _vtensor.plan_step(log_path, 1 << 50, "none", "torch-step", gpu_file, 2, {})["peak_bytes"][-1]
        lo = start
        while hi - lo > max(hi // 200, 4096):
            mid = (lo + hi) // 2
            try:
                _vtensor.plan_step(log_path, mid, "lru", "torch-step", gpu_file, 2, {})
                hi = mid
            except _vtensor.OutOfMemoryError:
                lo = mid
        return hi

    def plan_text(self):
        """Each plan, one move a line: the op boundary, the move, the tensor (the log's names)."""
        if not self.plans:
            return "no plan yet: the first step is measured"
        lines = []
        for plan in self.plans.values():
            i = plan["info"]
            lines.append(f"plan by {i['policy']} from step {i['planned_from']}: {i['moves']} moves over {i['ops']} ops, "
                         f"predicted {i['predicted_ms']:.2f} ms a step, peak {_vtensor.format_bytes(i['predicted_peak_bytes'])}")
            for point in sorted(plan["moves"]):
                for kind, name in plan["moves"][point]:
                    lines.append(f"  before op {point:5d}: {kind:9s} {name}")
        return "\n".join(lines)

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
        if self._plan is None:  # a measured step saves as plain PyTorch does: the log's lifetimes are its
            if owner not in rec.saved:
                rec.saved.add(owner)
                rec.emit(INSTRUCTION="SAVED", NAME=name)  # the storages the plan may move
            return ("raw", t)
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
        return ("e", _Handle(self, e, t), name)

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
            e.alive = False
            e.dev = e.host = e.mapping = e.event = None
            e.loc = "gone"

    # ------------------------------------------------------------------ at op boundaries
    def _before_op(self, k):
        if self._on_plan:
            if k >= len(self._plan["ops"]):
                self._diverged(f"the step runs more ops than the measured one's {len(self._plan['ops'])}")
                return
            for kind, name in self._plan["moves"].get(k, ()):
                if kind in ("swap_out", "drop", "compress"):
                    self._move(kind, name)
        if self._plan is not None:
            made = self._plan["made"]
            self._keep_within_budget(made[k] if self._on_plan and k < len(made) else 0)

    def _after_op(self, k):
        if self._on_plan and self._rec.op_names[k] != self._plan["ops"][k]:
            self._diverged(f"op {k} is {self._rec.op_names[k]} where the measured step ran {self._plan['ops'][k]}")
        if self._on_plan:
            for kind, name in self._plan["moves"].get(k + 1, ()):
                if kind == "prefetch":
                    self._move(kind, name)
        self._sample()

    def _sample(self):
        b = self._device_bytes()
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

    def _keep_within_budget(self, coming=0):
        """Passive eviction: saved tensors to host, least recently used first, until the device
        holds the budget less `coming` (the bytes the next op makes) and the slack, or none is left
        to move."""
        tried = set()
        while self._device_bytes() + coming + self.slack > self.budget:
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
        self._s["swapped_out_bytes"] += e.nbytes

    def _to_device(self, e):
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
        for _, n, version in rec.recipes[p[0]][3]:
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
        func, plain, spec, slots, rng = rec.recipes[k]
        flat = list(plain)
        for i, n, _ in slots:
            flat[i] = self._value(n, memo)
        args, kwargs = tree_unflatten(flat, spec)
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
        t = [r for r in tree_flatten(out)[0] if isinstance(r, torch.Tensor)][j]
        u8 = torch.empty(0, dtype=torch.uint8, device=t.device)
        u8.set_(t.untyped_storage())
        memo[owner] = u8
        return u8
