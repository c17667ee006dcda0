"""use_allocator / stats / OOM, on CPU torch through the fake device hook (HostDevice): the same C
entry points CUDAPluggableAllocator calls, over a host arena."""
import gc

import pytest
import torch

import vtensor.torch as vt

MiB = 1 << 20


@pytest.fixture(params=["caching", "planned"])
def dev(request):
    d = vt.use_allocator(budget="4MiB", allocator=request.param, device=vt.HostDevice())
    yield d
    gc.collect()


def test_tensors_live_in_the_arena_and_stats_follow(dev):
    a = dev.empty((256, 256))  # 256 KiB
    a.copy_(torch.arange(256 * 256, dtype=torch.float32).view(256, 256))
    s = vt.stats()
    assert s["allocated_bytes"] == 256 * 1024 and s["capacity_bytes"] == 4 * MiB
    b = dev.empty((256, 256))
    torch.matmul(a, a, out=b)
    assert torch.equal(b, a @ a)  # the arena's bytes are ordinary tensor memory
    assert vt.max_memory_allocated() == 512 * 1024
    assert vt.stats()["allocated_bytes.all.peak"] == 512 * 1024 == vt.stats()["reserved_bytes.all.current"]
    del a
    gc.collect()
    assert vt.memory_allocated() == 256 * 1024
    assert vt.max_memory_allocated() == 512 * 1024  # the peak stays until reset
    vt.reset_peak_memory_stats()
    assert vt.max_memory_allocated() == 256 * 1024
    del b
    gc.collect()
    s = vt.stats()
    assert s["allocated_bytes"] == 0 and s["num_allocs"] == s["num_frees"] == 2


def test_oom_names_request_in_use_largest_block_and_fragmentation(dev):
    # Fill with 1 MiB blocks, free every other: 2 MiB free in two 1 MiB holes.
    blocks = [dev.empty((MiB // 4,)) for _ in range(4)]
    del blocks[0], blocks[1]  # frees blocks 0 and 2 of the original four
    gc.collect()
    s = vt.stats()
    assert s["free_bytes"] == 2 * MiB and s["largest_free_block_bytes"] == MiB
    assert s["fragmentation"] == pytest.approx(0.5)
    with pytest.raises(vt.OutOfMemoryError) as e:
        dev.empty((3 * MiB // 8,))  # 1.5 MiB: fits by bytes, not in any hole
    msg = str(e.value)
    assert "requested 1.50 MiB" in msg and "2.00 MiB in use" in msg and "4.00 MiB budget" in msg
    assert "largest free block 1.00 MiB" in msg and "fragmentation 50.0%" in msg
    assert vt.stats()["num_ooms"] == 1 and vt.last_oom() == msg
    assert isinstance(e.value, MemoryError)


def test_planned_allocator_serves_the_second_step_from_its_plan():
    dev = vt.use_allocator(budget="8MiB", allocator="planned", device=vt.HostDevice())

    def step():  # the same allocation sequence every step, like a training step
        with vt.step():
            x = dev.empty((64 * 1024,))
            y = dev.empty((128 * 1024,))
            del x
            z = dev.empty((32 * 1024,))
            del y, z
            gc.collect()

    step()
    assert vt.stats()["plan"]["planned_requests"] == 0
    step()
    plan = vt.stats()["plan"]
    assert plan["planned_requests"] == 3 and plan["fallback_requests"] == 0


def test_bad_arguments_name_what_is_accepted():
    with pytest.raises(ValueError, match="accepted: 'caching', 'planned'"):
        vt.use_allocator(budget="1GiB", allocator="bfc", device=vt.HostDevice())
    with pytest.raises(ValueError, match="accepted"):
        vt.use_allocator(budget="ten gigs", device=vt.HostDevice())
    with pytest.raises(ValueError, match="budget"):
        vt.use_allocator(budget=-5, device=vt.HostDevice())
    with pytest.raises(ValueError, match="HostDevice"):
        vt.use_allocator(budget="1GiB", device="cpu")


@pytest.mark.skipif(hasattr(getattr(torch.cuda, "memory", None), "CUDAPluggableAllocator") and torch.cuda.is_available(),
                    reason="a GPU with torch >= 2.0 is here: the real path applies")
def test_cuda_path_says_what_it_needs():
    with pytest.raises(RuntimeError, match="torch >= 2.0|needs a GPU"):
        vt.use_allocator(budget="1GiB")
