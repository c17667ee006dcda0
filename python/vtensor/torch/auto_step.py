"""vtensor's planner `auto` for a PyTorch training step: each tensor autograd saves is kept,
offloaded to host memory and prefetched back, or dropped and recomputed, as the C++ planner
decides for a budget on the step's real peak.

    step = vtensor.torch.auto(model, budget="6GiB", optimizer=opt)
    for x, y in loader:
        with step:                     # forward AND backward inside: one step
            loss_fn(model(x), y).backward()
        opt.step(); opt.zero_grad()
    print(step.stats())

Step 1 is measured and runs as plain PyTorch does until it would pass the budget, where the passive
eviction below moves saved tensors to host (the plain step's peak is then the device's bytes plus
those on host at their most; the log's lifetimes are the plain step's): every aten op
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
compression is not planned (the log holds no densities); the measured step's passive eviction
does not know an op's outputs before it runs, so it holds the budget to within one op's outputs.
"""
import os
import tempfile
import time

import torch

from vtensor import _vtensor
from vtensor.torch._step_moves import _Guided, _HostPool
from vtensor.torch._step_plan import _Planning
from vtensor.torch._step_record import _local, _StepRecorder, _start_tensors, _storage_key
from vtensor.torch._util import check_module, parse_budget
from vtensor.torch.memory import PeakMeter, malloc_in_use

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


class AutoStep(_Planning, _Guided):
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
        grads = sum(_local(p).untyped_storage().nbytes() for p in self.model.parameters() if p.requires_grad and p.grad is None)
        return held + grads + self._state_to_come()

    def _state_to_come(self):
        """The optimizer state its first step will make (Adam's two moments, SGD's momentum): it is
        not there before, and the budget must hold it after."""
        if self.optimizer is None or self.optimizer.state:
            return 0
        per = {"Adam": 2, "AdamW": 2, "RMSprop": 1, "Adagrad": 1}.get(type(self.optimizer).__name__, 0)
        if isinstance(self.optimizer, torch.optim.SGD):
            per = 1 if any(g.get("momentum", 0) for g in self.optimizer.param_groups) else 0
        return per * sum(_local(p).untyped_storage().nbytes() for p in self.model.parameters() if p.requires_grad)

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
        mode = "measured" if measuring else "passive" if self._plan["info"]["policy"] == "passive" else "guided"
        self._s = {"step": len(self.history) + 1, "mode": mode, "policy": self.policy,
                   "budget": self.budget, "swapped_out_bytes": 0, "swapped_in_bytes": 0, "recomputed_ops": 0,
                   "late": 0, "prefetches_waited": 0, "passive_evictions": 0, "moves_made": 0, "moves_unreachable": 0,
                   "moves_held": 0, "saved_bytes": 0,
                   "planned_from": None if measuring else self._plan["info"]["planned_from"], "reason": None}
        self._entries = {}      # storage owner's name -> _Entry (this step's)
        self._clock = 0
        self._waiting = []      # prefetches that did not fit yet
        self._sampled = None    # the device's bytes at the last op boundary
        self._host_bytes = 0    # saved bytes on host now
        self._plain_peak = 0    # the most the device and those bytes held at once: a plain step's peak
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
        s.update(time_ms=(time.perf_counter() - self._t0) * 1e3, peak_bytes=self._peak, peak_op=self._peak_op, ops=rec.ops,
                 plain_peak_bytes=max(self._peak, self._plain_peak))
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

