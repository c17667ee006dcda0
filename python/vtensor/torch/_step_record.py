"""The recorder of a vtensor.torch.auto step: vtensor.torch.record's, naming every tensor the same
way in every step, with what a guided step needs (each forward op's recipe to recompute its
results, each name's storage owner and geometry, the step's hooks at each op boundary)."""
import weakref

import torch

from vtensor.torch._flat import strip, tensors_in
from vtensor.torch.record import _Recorder, op_info


def _storage_key(t):
    return t.untyped_storage().data_ptr()


def _local(t):
    """A DTensor's (FSDP2's sharded parameters, gradients, optimizer state) local shard, which holds
    this rank's bytes; any other tensor itself."""
    local = getattr(t, "_local_tensor", None)
    return local if isinstance(local, torch.Tensor) else t


def _start_tensors(model, optimizer, device):
    """What the device holds when a step begins: parameters, buffers, gradients, optimizer state
    (a DTensor's local shard)."""
    ts = list(model.parameters()) + list(model.buffers())
    ts += [p.grad for p in model.parameters() if p.grad is not None]
    if optimizer is not None:
        for st in optimizer.state.values():
            ts += [v for v in st.values() if isinstance(v, torch.Tensor)]
    seen, out = set(), []
    for t in map(_local, ts):
        if t.device.type == device and _storage_key(t) not in seen:
            seen.add(_storage_key(t))
            out.append(t)
    return out


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
        self.recipes = []      # per forward op: (func, args with tensors as slots, [(slot, name, version)], rng state) or None
        self.live = {}         # name -> weakref to this step's tensor
        self.constants = {}    # name -> tensor (held for the step: a recomputation may read it)
        self.op_names = []
        self.saved = set()     # owners autograd saved (the log's SAVED lines)
        self.made = []         # per op, the bytes of the storages it made
        self.made_version = {} # name of a storage's maker -> its version then (a later in-place write bumps it)
        self.names_of = {}     # owner -> the names over its storage
        self.paused = False
        self.backward_at = None
        self.handles = {}      # name -> the saved-tensor handles autograd holds over it
        self.deferred = set()  # names whose tensor is gone while a handle still holds them

    def hold(self, name):
        self.handles[name] = self.handles.get(name, 0) + 1

    def let_go(self, name):
        n = self.handles.get(name, 0) - 1
        if n > 0:
            self.handles[name] = n
            return
        self.handles.pop(name, None)
        if name in self.deferred:
            self.deferred.discard(name)
            super()._release(name)

    def _release(self, name):
        """The log's RELEASE of a tensor autograd saved waits for its last handle."""
        if self.handles.get(name):
            self.deferred.add(name)
        else:
            super()._release(name)

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
        self.paused = True
        try:
            self.step._before_op(k)
        finally:
            self.paused = False
        _, writes, func_name, seeded = op_info(func)
        forward = self.backward_at is None
        rng = self.step._rng_state() if forward and seeded else None
        given = tensors_in((args, kwargs))
        inputs = {_storage_key(a) for a in given}
        known = {id(r) for r in given}
        out = super().__torch_dispatch__(func, types, args, kwargs)
        results = tensors_in(out)
        self.op_names.append((func_name, tuple(tuple(r.shape) for r in results)))
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
            self.recipes.append(None if writes else self._recipe(func, args, kwargs, rng))
        self.paused = True
        try:
            self.step._after_op(k)
        finally:
            self.paused = False
        return out

    def _recipe(self, func, args, kwargs, rng):
        """How to make the op's results again (None where it writes an input, as batch norm's
        running statistics: it runs once only)."""
        given = []
        plain = strip((args, kwargs), given)
        slots = [(i, self.name_of(a), a._version) for i, a in enumerate(given)]
        if any(n is None for _, n, _ in slots):
            return None
        return func, plain, slots, rng

