"""Recomputation for PyTorch 2 under a memory budget: chosen per region and per op, carried out by
selective activation checkpointing (torch >= 2.4).

    report = vtensor.torch.auto_checkpoint(model, (x,), budget="64MiB", loss_fn=lambda out: F.cross_entropy(out, y))

One measured step finds the regions: every module is measured (the saved bytes made inside it), and
the candidates are the outermost modules holding at most half of the step's saved bytes, or
whose children are single layers (any module, at any depth; a module called twice in a step is
split into its children). A second
measured step gives each candidate's forward time, saved and output bytes, which candidates'
outputs it reads and saves, each op inside it (time, bytes it makes), and the step's real peak
(vtensor.torch.memory: torch's allocator on CUDA, malloc's bytes in use on CPU).
  Regions, in C++ (vtensor._vtensor.choose_checkpoints): the candidate chain becomes a vtensor
    Graph, each choice judged by the checkpoint policy's exact peak replay; the least recompute
    that fits, else the lowest peak (python/src/planning.h).
  Ops: where the chosen regions leave room under the budget, the ops inside them that save the most
    recompute time per byte are saved rather than recomputed (CheckpointPolicy.MUST_SAVE; the rest
    PREFER_RECOMPUTE), as long as their bytes fit in that room.
  Applied with forward hooks (CheckpointHooks: torch.utils.checkpoint's non-reentrant generator
    with a selective-checkpointing context), never by patching `forward`: the model pickles
    (torch.save), deep-copies and round-trips its state_dict; remove_checkpoints(model) undoes it.
  Measured again: the report has the real peak before and after. When the choice does not fit, the
  same regions are measured without their saved ops, then the budget given to the replay is lowered
  by the miss and it chooses again (at most 3 choices are measured; the lowest peak is kept); when
  none fits, a warning says by how much it misses.
The budget is on the step's real activation peak: what the step holds above what was allocated
when it began (saved activations, gradients as they appear, temporaries), measured the same way
before and after. The measured steps leave no trace: buffers (batch-norm statistics), the RNG
state and the parameters' .grad are restored after each. Deviation from vtensor's C++ checkpoint
policy: torch's checkpoint re-runs a region's forward, so batch norm updates its running statistics
again when recomputed (torch's documented behaviour); gradients and losses are unchanged.
"""
import functools
import time
import warnings
import weakref

import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import (CheckpointPolicy, _checkpoint_without_reentrant_generator,
                                    create_selective_checkpoint_contexts)

from vtensor import _vtensor
from vtensor.torch import _saved
from vtensor.torch._util import check_module, parse_budget
from vtensor.torch.memory import peak_memory

_REGION_SHARE = 2  # a candidate region holds at most 1/2 of the step's saved bytes
_MARGIN = 0.02  # of the budget, kept free: the real peak's noise between two measured steps
_TRIES = 3  # choices measured: each next one asks the replay for what the last one missed by


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _tensors(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _tensors(y)
    elif hasattr(x, "to_tuple"):  # Hugging Face ModelOutput
        yield from _tensors(x.to_tuple())


def _ptr(t):
    return t.untyped_storage().data_ptr()


def _nbytes(t):
    r, _ = _saved.region(t)
    return r.numel() * r.element_size()


# ---------------------------------------------------------------------------- applying a choice
class CheckpointHooks:
    """The forward pre- and post-hooks that make one module a checkpointed region. save_ops: the
    (op name, occurrence) pairs inside the region whose outputs are saved; every other op is
    recomputed in backward. Picklable and deep-copyable (the generator of a forward in flight is not
    state)."""

    def __init__(self, save_ops=()):
        self.save_ops = frozenset(save_ops)
        self._enabled, self._gen = True, None

    def __getstate__(self):
        return {"save_ops": self.save_ops}

    def __setstate__(self, state):
        self.__init__(state["save_ops"])

    def pre(self, module, args, kwargs):
        if not self._enabled or not torch.is_grad_enabled():
            return
        gen = _checkpoint_without_reentrant_generator(module, True, self._contexts, "default", False, True,
                                                      *args, **kwargs)
        next(gen)
        self._gen = gen

    def post(self, module, args, output):
        gen, self._gen = self._gen, None
        if gen is None:
            return
        try:
            next(gen)
        except StopIteration:
            return
        raise RuntimeError("vtensor checkpoint: the checkpoint generator did not finish")

    def _contexts(self):
        counts = {False: {}, True: {}}  # forward and recompute each count their own occurrences
        saved = self.save_ops

        def policy(ctx, op, *args, **kwargs):
            c = counts[ctx.is_recompute]
            name = str(op)
            i = c.get(name, 0)
            c[name] = i + 1
            return CheckpointPolicy.MUST_SAVE if (name, i) in saved else CheckpointPolicy.PREFER_RECOMPUTE

        fwd, recompute = create_selective_checkpoint_contexts(policy)
        return fwd, _Recomputing(self, recompute)


class _Recomputing:
    """The recompute context: the region's own hooks stay off while torch re-runs its forward."""

    def __init__(self, hooks, inner):
        self.hooks, self.inner = hooks, inner

    def __enter__(self):
        self.hooks._enabled = False
        self.inner.__enter__()

    def __exit__(self, *exc):
        try:
            return self.inner.__exit__(*exc)
        finally:
            self.hooks._enabled = True


def checkpoint_module(module, save_ops=()):
    """Make `module` a checkpointed region (see CheckpointHooks); returns its hooks."""
    check_module(module, "module")
    remove_checkpoints(module, recurse=False)
    h = CheckpointHooks(save_ops)
    module._vtensor_checkpoint = (h, module.register_forward_pre_hook(h.pre, with_kwargs=True),
                                  module.register_forward_hook(h.post))
    return h


def remove_checkpoints(model, recurse=True):
    """Undo auto_checkpoint / checkpoint_module on `model` (and its submodules)."""
    for m in (model.modules() if recurse else [model]):
        hooks = m.__dict__.pop("_vtensor_checkpoint", None)
        if hooks is not None:
            hooks[1].remove()
            hooks[2].remove()


def checkpointed_modules(model):
    """Names of the modules auto_checkpoint made regions, with their saved ops."""
    return {n: sorted(m._vtensor_checkpoint[0].save_ops) for n, m in model.named_modules()
            if "_vtensor_checkpoint" in m.__dict__}


# ---------------------------------------------------------------------------- measuring
class _Untouched:
    """A measured step leaves the model as it found it: buffers, the RNG state and .grad."""

    def __init__(self, model):
        self.model = model

    def __enter__(self):
        self.buffers = [(b, b.detach().clone()) for b in self.model.buffers()]
        self.grads = [(p, p.grad) for p in self.model.parameters()]
        self.rng = torch.get_rng_state()
        self.cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
        for p in self.model.parameters():
            p.grad = None

    def __exit__(self, *exc):
        with torch.no_grad():
            for b, v in self.buffers:
                b.copy_(v)
        for p, g in self.grads:
            p.grad = g
        torch.set_rng_state(self.rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
        return False


def _run_step(model, example, loss_fn):
    out = model(*example)
    loss = loss_fn(out) if loss_fn is not None else sum(t.float().sum() for t in _tensors(out) if t.is_floating_point())
    del out
    loss.backward()


def _device_of(model, example):
    for t in list(_tensors(example)) + list(model.parameters()):
        return t.device.type
    return "cpu"


def _region_candidates(model, example, loss_fn):
    """Pass 1: each module's saved bytes (inclusive) and calls; the outermost modules holding at most
    1/_REGION_SHARE of the step's saved bytes, called once, in the order they first run."""
    names = {m: n for n, m in model.named_modules()}
    saved, calls, order, stack = {}, {}, [], []

    def pre(mod, args):
        stack.append(mod)
        calls[mod] = calls.get(mod, 0) + 1
        if mod not in order:
            order.append(mod)

    def post(mod, args, out):
        stack.pop()

    seen = set()

    def pack(t):
        if isinstance(t, torch.Tensor) and not _saved.is_parameter(t):
            r, start = _saved.region(t)
            k = _saved.key(t, start, r.numel())
            if k not in seen:
                seen.add(k)
                for m in set(stack):
                    saved[m] = saved.get(m, 0) + r.numel() * r.element_size()
                saved[model] = saved.get(model, 0) + (0 if model in stack else r.numel() * r.element_size())
        return t

    handles = [m.register_forward_pre_hook(pre) for m in names] + [m.register_forward_hook(post) for m in names]
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            _run_step(model, example, loss_fn)
    finally:
        for h in handles:
            h.remove()
    total = max(saved.get(model, 0), 1)
    out = []

    def visit(m):
        kids = list(m.children())
        leaves_only = all(not list(c.children()) for c in kids)  # splitting it gives single layers
        small = saved.get(m, 0) * _REGION_SHARE <= total
        if m is not model and (small or leaves_only) and calls.get(m, 0) == 1 and saved.get(m, 0) > 0:
            out.append(m)
        elif kids:
            for c in kids:
                visit(c)

    visit(model)
    out.sort(key=order.index)
    return [(names[m], m) for m in out]


class _OpRecorder(TorchDispatchMode):
    """Pass 2's ops inside the candidate regions: (name, occurrence in the region, ns, bytes made)."""

    def __init__(self, stack, ops):
        super().__init__()
        self.stack, self.ops, self.counts = stack, ops, {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        t0 = time.perf_counter_ns()
        out = func(*args, **(kwargs or {}))
        ns = time.perf_counter_ns() - t0
        if self.stack and torch.is_grad_enabled():
            i = self.stack[-1]
            name = str(func)
            c = self.counts.setdefault(i, {})
            k = c.get(name, 0)
            c[name] = k + 1
            ins = {_ptr(t) for t in _tensors((args, kwargs)) if t.layout == torch.strided}
            made = sum(_nbytes(t) for t in _tensors(out) if t.layout == torch.strided and _ptr(t) not in ins)
            self.ops[i].append((name, k, ns, made))
        return out


def measure_modules(model, example, loss_fn=None, modules=None):
    """One measured forward + backward over the candidate regions (or the modules named in
    `modules`): per candidate its figures, the step's peak of live saved bytes, the saved bytes
    outside the candidates, and the step's real peak. The model is left as it was."""
    check_module(model)
    named = dict(model.named_modules())
    with _Untouched(model):
        if modules is not None:
            for n in modules:
                if n not in named or n == "":
                    raise ValueError(f"unknown module {n!r}; accepted: the names of model.named_modules(), e.g. "
                                     + ", ".join(repr(k) for k in list(named)[1:6]))
            cands = [(n, named[n]) for n in modules]
        else:
            cands = _region_candidates(model, example, loss_fn)
    if not cands:
        raise ValueError("the model has no submodule that saves tensors for backward; pass modules=[names]")
    with torch.no_grad():
        with _Untouched(model):
            model(*example)  # warm-up: one-time costs would otherwise count as recompute time
    units = [dict(name=n, saved=0, out=0, inputs=set(), saves=set(), cost_ns=0.0, pending={}, in_ptrs=set())
             for n, _ in cands]
    ops = [[] for _ in cands]
    stack, producer, t_start = [], {}, {}
    live = {"refs": {}, "size": {}, "live": 0, "peak": 0}
    outside = [0]

    def producer_of(t):
        hit = producer.get(_ptr(t))  # a storage names a module's output only while that output lives
        return hit[1] if hit is not None and hit[0]() is not None else -1

    def pre(i, mod, args):
        stack.append(i)
        for t in _tensors(args):
            units[i]["inputs"].add(producer_of(t))
            units[i]["in_ptrs"].add(_ptr(t))
        t_start[i] = time.perf_counter_ns()

    def post(i, mod, args, out):
        units[i]["cost_ns"] += time.perf_counter_ns() - t_start[i]
        stack.pop()
        outs = {}
        for t in _tensors(out):
            p = _ptr(t)
            if producer_of(t) >= 0 or p in units[i]["in_ptrs"]:
                continue  # a view of its input (flatten, reshape): no bytes of its own
            outs[p] = _nbytes(t)
            producer[p] = (weakref.ref(t), i)
        units[i]["out"] += sum(outs.values())
        for p, b in units[i]["pending"].items():
            if p in outs:
                units[i]["saves"].add(i)
            else:
                units[i]["saved"] += b
        units[i]["pending"] = {}

    class Saved:
        __slots__ = ("t", "key")

        def __init__(self, t, key):
            self.t, self.key = t, key

        def __del__(self):
            live["refs"][self.key] -= 1
            if live["refs"][self.key] == 0:
                del live["refs"][self.key]
                live["live"] -= live["size"].pop(self.key)

    def pack(t):
        if not isinstance(t, torch.Tensor) or _saved.is_parameter(t):
            return ("raw", t)
        r, start = _saved.region(t)
        key = _saved.key(t, start, r.numel())
        b = r.numel() * r.element_size()
        new = key not in live["refs"]
        live["refs"][key] = live["refs"].get(key, 0) + 1
        if new:
            live["size"][key] = b
            live["live"] += b
            live["peak"] = max(live["peak"], live["live"])
        j = producer_of(t)
        if j >= 0 and stack and j != stack[-1]:
            units[stack[-1]]["saves"].add(j)
        if new:
            if stack and j < 0 and key[0] not in units[stack[-1]]["in_ptrs"]:
                units[stack[-1]]["pending"][key[0]] = b  # made inside: the module's own
            elif j < 0:
                outside[0] += b  # the model's inputs and what is saved outside the candidates
        return ("s", Saved(t, key))

    def unpack(x):
        return x[1] if x[0] == "raw" else x[1].t

    handles = []
    for i, (_, m) in enumerate(cands):
        handles.append(m.register_forward_pre_hook(functools.partial(pre, i)))
        handles.append(m.register_forward_hook(functools.partial(post, i)))
    meter = peak_memory(_device_of(model, example))
    try:
        with _Untouched(model), meter, _OpRecorder(stack, ops), \
                torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            _run_step(model, example, loss_fn)
    finally:
        for h in handles:
            h.remove()
    for u, o in zip(units, ops):
        u["ops"] = o
    return {"candidates": cands, "units": units, "saved_peak": live["peak"], "saved_outside": outside[0],
            "real_peak": meter.peak_bytes}


def measure_peak(model, example, loss_fn=None, warmup=True):
    """The step's real activation peak (vtensor.torch.memory), the model left as it was. warmup: run
    one step unmeasured first (a process's first step allocates its kernels' caches and pools)."""
    check_module(model)
    meter = peak_memory(_device_of(model, example))
    if warmup:  # under a meter too: the first dispatch through the meter's mode imports modules (malloc'd)
        with _Untouched(model), peak_memory(_device_of(model, example)):
            _run_step(model, example, loss_fn)
    with _Untouched(model), meter:
        _run_step(model, example, loss_fn)
    return meter.peak_bytes


# ---------------------------------------------------------------------------- choosing
def _choose_ops(units, chosen, room):
    """Per op: inside the chosen regions, the ops saving the most recompute per byte, while their
    bytes fit in `room`. Returns {unit index: {(op name, occurrence)}} and the bytes and ns taken."""
    cands = []
    for i in chosen:
        for name, k, ns, made in units[i]["ops"]:
            if made > 0 and ns > 0:
                cands.append((ns / made, i, name, k, ns, made))
    cands.sort(key=lambda c: -c[0])
    picked, used, saved_ns = {}, 0, 0.0
    for _, i, name, k, ns, made in cands:
        if used + made <= room:
            picked.setdefault(i, set()).add((name, k))
            used += made
            saved_ns += ns
    return picked, used, saved_ns


def auto_checkpoint(model, example, budget, loss_fn=None, modules=None, per_op=True):
    """Checkpoint regions of `model` (in place, with hooks) so that its step's real activation peak
    fits `budget`, with the least recomputation; `example` is a tuple of inputs for the measured
    steps and loss_fn(output) their loss (default: the sum of the outputs). Returns the report."""
    check_module(model)
    nbytes = parse_budget(budget)
    if not isinstance(example, tuple):
        raise ValueError("example must be a tuple of the model's inputs, e.g. (x,)")
    if loss_fn is not None and not callable(loss_fn):
        raise ValueError("loss_fn must be callable (output -> scalar loss) or None")
    if modules is not None and (isinstance(modules, str) or not all(isinstance(n, str) for n in modules)):
        raise ValueError("modules must be a list of module names (model.named_modules()), or None")
    remove_checkpoints(model)
    m = measure_modules(model, example, loss_fn, modules)
    cands, units = m["candidates"], m["units"]
    # The plain step measured as the choices are (measure_peak, no module hooks): the recording
    # step's own figure can read low, and a choice is judged against the plain step.
    plain = max(m["real_peak"], measure_peak(model, example, loss_fn, warmup=False))
    # What the step holds beside its saved tensors (gradients, temporaries): assumed unchanged by the choice.
    beside = max(m["real_peak"] - m["saved_peak"], 0)
    saved_budget = max(int(nbytes * (1 - _MARGIN)) - beside - m["saved_outside"], 1)
    mus = []
    for u in units:
        mu = _vtensor.ModuleUnit()
        mu.name, mu.saved_bytes, mu.out_bytes = u["name"], u["saved"], u["out"]
        mu.inputs = sorted(u["inputs"]) or [-1]
        mu.saves = sorted(u["saves"])
        mu.cost_ns = float(u["cost_ns"])
        mus.append(mu)
    tries, after, best, with_ops = [], None, None, per_op
    for _ in range(_TRIES):
        choice = _vtensor.choose_checkpoints(mus, saved_budget)
        chosen = choice["chosen"]
        room = saved_budget - choice["peak"] if choice["fits"] and with_ops else 0
        picked, op_bytes, op_ns = _choose_ops(units, chosen, room)
        remove_checkpoints(model)
        for i in chosen:
            checkpoint_module(cands[i][1], picked.get(i, ()))
        try:
            after = measure_peak(model, example, loss_fn, warmup=False)
        except RuntimeError as e:
            # torch refuses an op's saved output that a later op of the region writes in place
            # (its recompute would read other values): the same regions without their saved ops.
            if not picked or "mutated" not in str(e):
                raise
            tries.append({"saved_budget": saved_budget, "regions": len(chosen), "ops_saved": op_bytes,
                          "measured_peak": None, "error": str(e).splitlines()[0]})
            with_ops = False
            continue
        tries.append({"saved_budget": saved_budget, "regions": len(chosen), "ops_saved": op_bytes,
                      "measured_peak": after})
        if best is None or after < best[0]:
            best = (after, choice, picked, op_bytes, op_ns)
        if after <= nbytes or not choice["fits"]:
            break
        if picked:  # a miss: first the same regions without their saved ops
            with_ops = False
            continue
        # The replay's peak was under the measured one: ask it for the miss less (doubled each try,
        # the choice being discrete), and choose again.
        saved_budget = max(saved_budget - (after - nbytes) * 2 ** (len(tries) - 1), 1)
    if best is None:  # every try refused (its last had saved ops): recompute nothing
        best = (plain, choice, {}, 0, 0.0)
    after, choice, picked, op_bytes, op_ns = best
    chosen = choice["chosen"]
    remove_checkpoints(model)
    if after >= plain:  # no measured choice held less than the plain step: recompute nothing
        chosen, picked, op_bytes, op_ns, after = [], {}, 0, 0.0, plain
    for i in chosen:
        checkpoint_module(cands[i][1], picked.get(i, ()))
    report = {
        "chosen": [cands[i][0] for i in chosen],
        "candidates": [n for n, _ in cands],
        "saved_ops": {cands[i][0]: sorted(s) for i, s in picked.items()},
        "budget": nbytes,
        "measured_peak_before": plain,
        "measured_peak_after": after,
        "fits": after <= nbytes,
        "saved_peak_before": m["saved_peak"],
        "predicted_peak": choice["peak"] + m["saved_outside"] + beside + op_bytes,
        "predicted_peak_none": choice["peak_none"] + m["saved_outside"] + beside,
        "held_beside_saved": beside,
        "saved_outside_candidates": m["saved_outside"],
        "recompute_ms": max(choice["recompute_ns"] - op_ns, 0.0) / 1e6 if chosen else 0.0,
        "choices_evaluated": choice["evaluated"],
        "rule": choice["rule"],
        "tries": tries,
    }
    if not report["fits"]:
        warnings.warn(f"vtensor auto_checkpoint: no choice fits the budget of {_vtensor.format_bytes(nbytes)}: the "
                      f"step's measured peak is {_vtensor.format_bytes(after)} with {len(chosen)} of {len(cands)} "
                      f"regions recomputed, {_vtensor.format_bytes(after - nbytes)} over; what the step holds beside "
                      f"its saved tensors ({_vtensor.format_bytes(beside)}) is the floor", stacklevel=2)
    return report
