"""What saved-tensor hooks share: the bytes a saved tensor reaches in its storage, and which tensors
are left alone (parameters, sparse and other non-strided layouts, other devices)."""
import torch


def is_parameter(t):
    """A leaf that requires grad (or a view of one): it stays where it is, whatever the policy."""
    b = t._base if t._base is not None else t
    return b.is_leaf and b.requires_grad


def region(t):
    """The part of t's storage that t reaches, as a 1-D tensor of t's dtype (no copy), and its first
    element's offset in the storage. A batch sliced from a preloaded dataset is its slice, not the
    dataset: a view's bytes are those between its first and last element."""
    start = t.storage_offset()
    extent = 0 if t.numel() == 0 else 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))
    r = torch.empty(0, dtype=t.dtype, device=t.device)
    r.set_(t.untyped_storage(), start, (extent,), (1,))
    return r, start


def key(t, start, extent):
    """Entries are shared by saved tensors over the same bytes of one storage at one version."""
    return (t.untyped_storage().data_ptr(), t._version, start, extent)


class View:
    """A saved tensor's geometry relative to its region, to rebuild it from restored bytes."""
    __slots__ = ("size", "stride", "offset")

    def __init__(self, t, start):
        self.size, self.stride, self.offset = tuple(t.size()), tuple(t.stride()), t.storage_offset() - start

    def of(self, r):
        return r.as_strided(self.size, self.stride, r.storage_offset() + self.offset)


class Handle:
    """What autograd holds for a saved tensor: its entry (counted) and its view's geometry. The
    entry is let go (owner._release) when the last handle of it dies."""
    __slots__ = ("owner", "entry", "view", "__weakref__")

    def __init__(self, owner, entry, view):
        self.owner, self.entry, self.view = owner, entry, view
        entry.refs += 1

    def __del__(self):
        self.entry.refs -= 1
        if self.entry.refs == 0:
            self.owner._release(self.entry)
