"""Automatic activation checkpointing for PyTorch under a memory budget (pytorch#194696).

auto_checkpoint(model, example, budget) runs one measured forward and backward step, then wraps the
chosen modules' forward in torch.utils.checkpoint (reentrant, see _wrap) so that the bytes autograd holds
for backward fit the budget with the least recomputation, and returns a report of the choice.
  Measured: candidate modules (the members of every nn.Sequential / nn.ModuleList, outermost
    first, else the model's children; or those named in `modules`), each one's forward time, the
    bytes it saves for backward (through saved_tensors_hooks, a storage counted once, parameters
    not counted), its output's bytes and which modules' outputs it reads and saves, and the peak of
    live saved bytes over the step (a saved tensor is live until autograd lets go of it).
  Chosen: in C++ (vtensor._vtensor.choose_checkpoints): the module chain becomes a vtensor Graph
    and each choice is judged by the checkpoint policy's exact peak replay and its rule (least
    recompute that fits, else the lowest peak); see python/src/planning.h for why the search is
    over subsets of modules rather than Chen's segments. Recompute cost: the measured forward time.
  Applied and measured again: the report has the measured peak before and after.
The budget is on the peak of live saved-activation bytes, the part checkpointing changes;
parameters, gradients and optimizer state come on top. Deviation from vtensor's C++ checkpoint
policy: torch.utils.checkpoint re-runs a module's side effects (batch norm updates its running
statistics again when recomputed); gradients and losses are unchanged.
"""
import functools
import time
import weakref

import torch
import torch.nn as nn
import torch.utils.checkpoint as tcp

from vtensor import _vtensor
from vtensor.torch._util import parse_budget


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _tensors(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _tensors(y)


def _candidates(model, modules):
    named = dict(model.named_modules())
    if modules is not None:
        out = []
        for n in modules:
            if n not in named:
                raise ValueError(f"unknown module {n!r}; accepted: the names of model.named_modules(), e.g. "
                                 + ", ".join(repr(k) for k in list(named)[1:6]))
            out.append((n, named[n]))
        return out
    out, inside = [], set()
    for name, m in model.named_modules():
        if name in inside or any(name.startswith(p + ".") for p in inside):
            continue
        if isinstance(m, (nn.Sequential, nn.ModuleList)):
            for cn, c in m.named_children():
                full = f"{name}.{cn}" if name else cn
                out.append((full, c))
                inside.add(full)
    if not out:
        out = [(n, c) for n, c in model.named_children()]
    return out


class _Saved:
    __slots__ = ("t", "rec", "key")

    def __init__(self, t, rec, key):
        self.t, self.rec, self.key = t, rec, key
        rec.refs[key] = rec.refs.get(key, 0) + 1

    def __del__(self):
        self.rec.drop(self.key)


class _Recorder:
    """Live saved bytes, per storage, counted once while any packed copy of it is alive."""

    def __init__(self):
        self.refs, self.size = {}, {}
        self.live = self.peak = 0

    def add(self, t):
        s = t.storage()
        key = (s.data_ptr(), t._version)
        if key not in self.refs:
            self.size[key] = s.nbytes()
            self.live += s.nbytes()
            self.peak = max(self.peak, self.live)
        return key

    def drop(self, key):
        self.refs[key] -= 1
        if self.refs[key] == 0:
            del self.refs[key]
            self.live -= self.size.pop(key)


def _is_param(t):
    b = t._base if t._base is not None else t
    return b.is_leaf and b.requires_grad


def measure_modules(model, example, loss_fn=None, modules=None):
    """One measured forward + backward: per candidate module its figures, and the step's peak of live
    saved bytes. Gradients it leaves in .grad are zeroed afterwards."""
    cands = _candidates(model, modules)
    if not cands:
        raise ValueError("the model has no submodules to checkpoint; pass modules=[names]")
    with torch.no_grad():
        model(*example)  # warm-up: one-time costs would otherwise count as recompute time
    units = [dict(name=n, saved=0, out=0, inputs=set(), saves=set(), cost_ns=0.0, pending={}, in_ptrs=set()) for n, _ in cands]
    stack, producer, t_start = [], {}, {}
    rec = _Recorder()
    saved_outputs = set()  # modules whose output autograd saves
    outside = [0]

    def pre(i, mod, args):
        stack.append(i)
        for t in _tensors(args):
            units[i]["inputs"].add(_producer(t))
            units[i]["in_ptrs"].add(t.storage().data_ptr())
        t_start[i] = time.perf_counter_ns()

    def post(i, mod, args, out):
        units[i]["cost_ns"] += time.perf_counter_ns() - t_start[i]
        stack.pop()
        outs = {}
        for t in _tensors(out):
            p = t.storage().data_ptr()
            if _producer(t) >= 0 or p in units[i]["in_ptrs"]:
                continue  # a view of its input (flatten, reshape): no bytes of its own, like vtensor's views
            outs[p] = t.storage().nbytes()
            producer[p] = (weakref.ref(t), i)
        units[i]["out"] += sum(outs.values())
        for p, b in units[i]["pending"].items():
            if p in outs:
                units[i]["saves"].add(i)
                saved_outputs.add(i)
            else:
                units[i]["saved"] += b
        units[i]["pending"] = {}

    def _producer(t):
        # A storage pointer names a module's output only while that output is alive (pointers are reused).
        hit = producer.get(t.storage().data_ptr())
        return hit[1] if hit is not None and hit[0]() is not None else -1

    def pack(t):
        if not isinstance(t, torch.Tensor) or _is_param(t):
            return ("raw", t)
        new = (t.storage().data_ptr(), t._version) not in rec.refs
        key = rec.add(t)
        p, b = key[0], t.storage().nbytes()
        j = _producer(t)
        if j >= 0:
            saved_outputs.add(j)
            if stack and j != stack[-1]:
                units[stack[-1]]["saves"].add(j)
        if not new:
            pass  # its bytes went to the module that saved it first
        elif stack and j < 0 and p not in units[stack[-1]]["in_ptrs"]:
            units[stack[-1]]["pending"][p] = b  # made inside: the module's own (output or internal)
        elif j < 0:
            outside[0] += b  # the model's inputs, and what is saved outside the candidates: always kept
        return ("s", _Saved(t, rec, key))

    def unpack(x):
        return x[1] if x[0] == "raw" else x[1].t

    handles = []
    for i, (_, m) in enumerate(cands):
        handles.append(m.register_forward_pre_hook(functools.partial(pre, i)))
        handles.append(m.register_forward_hook(functools.partial(post, i)))
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            out = model(*example)
            loss = loss_fn(out) if loss_fn is not None else sum(t.float().sum() for t in _tensors(out))
            del out
            loss.backward()
            del loss
    finally:
        for h in handles:
            h.remove()
    for p in model.parameters():
        p.grad = None
    return cands, units, rec.peak, outside[0]


def auto_checkpoint(model, example, budget, loss_fn=None, modules=None):
    """Checkpoint the modules of `model` (in place) so the peak of saved-activation bytes fits
    `budget`; `example` is a tuple of inputs for one measured step, loss_fn(output) its loss (default:
    the sum of the outputs). Returns the report: chosen modules, measured and predicted peaks."""
    nbytes = parse_budget(budget)
    if not isinstance(example, tuple):
        raise ValueError("example must be a tuple of the model's inputs, e.g. (x,)")
    if loss_fn is not None and not callable(loss_fn):
        raise ValueError("loss_fn must be callable (output -> scalar loss) or None")
    cands, units, peak_before, outside = measure_modules(model, example, loss_fn, modules)
    mus = []
    for u in units:
        m = _vtensor.ModuleUnit()
        m.name, m.saved_bytes, m.out_bytes = u["name"], u["saved"], u["out"]
        m.inputs = sorted(u["inputs"]) or [-1]
        m.saves = sorted(u["saves"])
        m.cost_ns = float(u["cost_ns"])
        mus.append(m)
    choice = _vtensor.choose_checkpoints(mus, max(nbytes - outside, 1))
    for i in choice["chosen"]:
        _wrap(cands[i][1])
    _, _, peak_after, _ = measure_modules(model, example, loss_fn, modules)
    return {
        "chosen": [cands[i][0] for i in choice["chosen"]],
        "candidates": [n for n, _ in cands],
        "budget": nbytes,
        "measured_peak_before": peak_before,
        "measured_peak_after": peak_after,
        "fits": peak_after <= nbytes,
        "predicted_peak": choice["peak"] + outside,
        "predicted_peak_none": choice["peak_none"] + outside,
        "saved_outside_candidates": outside,
        "recompute_ms": choice["recompute_ns"] / 1e6,
        "choices_evaluated": choice["evaluated"],
        "rule": choice["rule"],
    }


def _wrap(module):
    if getattr(module, "_vtensor_checkpointed", False):
        return
    fwd = module.forward

    @functools.wraps(fwd)
    def checkpointed(*args, **kwargs):
        # Reentrant checkpoint: its inputs are saved with save_for_backward, so they pass through
        # saved-tensor hooks and are counted (the non-reentrant one holds them out of sight). It
        # needs an input that requires grad for the parameters inside to get theirs: a 0-element one.
        anchor = torch.empty(0, requires_grad=True)
        return tcp.checkpoint(lambda _a, *a: fwd(*a, **kwargs), anchor, *args, use_reentrant=True)

    module.forward = checkpointed
    module._vtensor_checkpointed = True
