"""A PyTorch training step recorded as an operator log that `vtensor replay` reads, so that every C++
policy (and `auto`) can be replayed on it on the sim backend.

    vtensor.torch.record_step(model, (x,), "step.log", loss_fn=lambda out: F.cross_entropy(out, y))
    $ vtensor replay --trace step.log --gpu h100-80g --policy capuchin --budget 50MiB

The log is DTR's operator-log format (Kirisame et al., ICLR'21; vtensor/memory/trace_io.h reads
it): JSON lines of CONSTANT (a tensor that exists before the step: parameters, inputs) with its
MEMORY (0 where a live tensor of the log already holds its storage), CALL (an aten op: its arguments, results, measured time in ns), each result's MEMORY and
ALIAS (the argument whose storage a view shares, "-1" for new bytes), MUTATE (an in-place op: the
indices of the arguments it writes; on a CALL line, the arguments an op with results also writes), RELEASE (the last Python or autograd reference is gone), and
ANNOTATE START / BACKWARD. A TorchDispatchMode records every op dispatched on the calling thread
(autograd's backward included); tensors are named by object, so two views of one storage are two
names over the same bytes. Time is the wall clock around each op (on CUDA after a synchronize, so
the recording step is slower than a real one; the times are the op's own). Deviations from DTR's
recorder (a patched PyTorch): no COPY lines (a Python alias is the same tensor object), and a
tensor released inside an op is released after the op's CALL line.
"""
import json
import os
import time
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from vtensor.torch._flat import tensors_in
from vtensor.torch._util import check_module


def _nbytes(t):
    return t.untyped_storage().nbytes()


_OPS = {}


def op_info(func):
    """(the op's name, its written arguments as (position, name), str(func), whether it draws random
    numbers): read from its schema once per op (a schema is rebuilt on every access)."""
    info = _OPS.get(func)
    if info is None:
        writes = tuple((i, a.name) for i, a in enumerate(func._schema.arguments)
                       if a.alias_info is not None and a.alias_info.is_write)
        info = _OPS[func] = (str(func.overloadpacket.__name__), writes, str(func),
                             torch.Tag.nondeterministic_seeded in func.tags)
    return info


def _index(tensors, t):
    """t's position in tensors, by identity (== on tensors compares values)."""
    return next((i for i, a in enumerate(tensors) if a is t), -1)


class _Recorder(TorchDispatchMode):
    def __init__(self, out, sync):
        super().__init__()
        self.out, self.sync = out, sync
        self.names = {}          # id(tensor) -> (weakref, name)
        self.pending = []        # releases seen while an op ran
        self.count = 0
        self.ops = 0
        self.holder = {}         # storage ptr -> weakref to the named tensor whose MEMORY line has its bytes

    def emit(self, **rec):
        self.out.write(json.dumps(rec, sort_keys=True) + "\n")

    def _release(self, name):
        self.pending.append(name)

    def flush(self):
        for n in self.pending:
            self.emit(INSTRUCTION="RELEASE", NAME=n)
        self.pending = []

    def name_of(self, t):
        hit = self.names.get(id(t))
        if hit is not None and hit[0]() is t:
            return hit[1]
        return None

    def _new_name(self, t):
        self.count += 1
        name = f"x{self.count}"
        self.names[id(t)] = (weakref.ref(t, lambda _r, n=name, k=id(t): (self.names.pop(k, None),
                                                                         self._release(n))), name)
        return name

    def _holds(self, t):
        """Whether a live named tensor already counts t's storage (DDP's gradients, views of its
        bucket made outside dispatch, are many constants over one storage)."""
        ptr = t.untyped_storage().data_ptr()
        w = self.holder.get(ptr)
        if ptr and w is not None and w() is not None:
            return True
        if ptr:
            self.holder[ptr] = weakref.ref(t)
        return False

    def constant(self, t):
        name = self._new_name(t)
        self.emit(INSTRUCTION="CONSTANT", NAME=name)
        self.emit(INSTRUCTION="MEMORY", MEMORY="0" if self._holds(t) else str(_nbytes(t)), NAME=name)
        return name

    def arg_names(self, args):
        names = []
        for a in args:
            if isinstance(a, torch.Tensor):
                names.append(self.name_of(a) or self.constant(a))
        return names

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = tensors_in((args, kwargs))
        names = self.arg_names(tensors)
        self.flush()
        if self.sync:
            torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        out = func(*args, **kwargs)
        if self.sync:
            torch.cuda.synchronize()
        ns = time.perf_counter_ns() - t0
        self.ops += 1
        mutated = []
        op, writes, _, _ = op_info(func)
        for i, arg in writes:
            v = args[i] if i < len(args) else kwargs.get(arg)
            if isinstance(v, torch.Tensor) and _index(tensors, v) >= 0:
                mutated.append(_index(tensors, v))
        results = tensors_in(out)
        fresh = [r for r in results if self.name_of(r) is None]
        if mutated and not fresh:
            self.emit(INSTRUCTION="MUTATE", NAME=op, ARGS=names, MUTATE=sorted(set(mutated)),
                      TIME=str(ns))
        else:
            # A result that is an argument (lift_fresh returns its input) is no new tensor.
            rnames = [self._new_name(r) for r in fresh]
            extra = {"MUTATE": sorted(set(mutated))} if mutated else {}  # batch norm's running statistics
            self.emit(INSTRUCTION="CALL", NAME=op, ARGS=names, RESULT=rnames, TIME=str(ns), **extra)
            for r, n in zip(fresh, rnames):
                ptr = r.untyped_storage().data_ptr()
                alias = next((i for i, a in enumerate(tensors) if a.untyped_storage().data_ptr() == ptr and ptr), -1)
                if alias < 0 and ptr:
                    self.holder[ptr] = weakref.ref(r)
                self.emit(INSTRUCTION="MEMORY", MEMORY=str(_nbytes(r)), NAME=n)
                self.emit(INSTRUCTION="ALIAS", ALIAS=str(alias), NAME=n)
        self.flush()
        return out


class _Passthrough(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _step(model, example, loss_fn, mark_backward=lambda: None):
    out = model(*example)
    loss = loss_fn(out) if loss_fn is not None else sum(
        t.float().sum() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.is_floating_point())
    del out
    mark_backward()
    loss.backward()


def record_step(model, example, path, loss_fn=None, warmup=True):
    """Run one forward and backward of `model` on `example` (a tuple of inputs) with every op
    recorded, and write the log to `path` (see the module's note). Returns the number of ops. The
    step's gradients are left in .grad as a plain step leaves them. warmup: one unrecorded step
    first (the model left as it was), so that one-time costs are not recorded as op times."""
    check_module(model)
    if not isinstance(example, tuple):
        raise ValueError("example must be a tuple of the model's inputs, e.g. (x,)")
    if loss_fn is not None and not callable(loss_fn):
        raise ValueError("loss_fn must be callable (output -> scalar loss) or None")
    if not isinstance(path, (str, os.PathLike)) or not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise ValueError(f"path must name a file in an existing folder, got {path!r}")
    if warmup:
        from vtensor.torch.checkpoint import _Untouched
        with _Untouched(model), _Passthrough():
            _step(model, example, loss_fn)
    sync = any(t.is_cuda for t in list(model.parameters()) + [a for a in example if isinstance(a, torch.Tensor)])
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as f:
            rec = _Recorder(f, sync)
            rec.emit(ANNOTATION="START", INSTRUCTION="ANNOTATE")
            def backward_starts():
                rec.flush()
                rec.emit(ANNOTATION="BACKWARD", INSTRUCTION="ANNOTATE")
            with rec:
                _step(model, example, loss_fn, backward_starts)
            rec.flush()
            ops = rec.ops
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return ops
