// MemoryManager: compression and decompression of tensors on the compression stream, their
// buffers and statistics, and the probe of a codec call's rate.

#include "vtensor/memory/memory_manager.h"

#include <algorithm>
#include <array>
#include <stdexcept>

#include "vtensor/core/errors.h"

namespace vtensor {

// A bitmask compression and decompression of a normally distributed tensor (every element
// non-zero: the most a codec call writes per element) at two sizes, the best of three of each,
// on the compression stream: the line through the two gives a call's latency and its time per
// byte read and written. Before the first iteration, in blocks the caching allocator merges back
// on free, so the arena every iteration starts from is as it would be without the probe.
std::optional<CodecRate> MemoryManager::measure_codec_rate() {
  if (!backend_.modelled_gpu().empty() || paged_ || !backend_.has_data()) return std::nullopt;
  const auto& a = allocator_->stats();
  size_t n = std::min(kCodecProbeElements, a.largest_free_block / 3 / sizeof(float)) / 1024 * 1024;
  if (n < 8 * 1024) return std::nullopt;  // too little room to time a line
  const size_t ws_bytes = codec_chunk_workspace(std::min(codec_chunk_elements(compression_.workspace_bytes), n));
  TensorInfo t;
  t.name = "codec probe";
  t.init = Init::kHeNormal;
  t.shape = Shape{static_cast<int64_t>(n)};
  std::vector<size_t> blocks;
  const auto block = [&](size_t bytes) {
    const auto off = allocator_->allocate(bytes, -1);
    if (off) blocks.push_back(*off);
    return off;
  };
  const auto src = block(n * sizeof(float)), dst = block(codec_bound(Codec::kBitmask, n)), ws = block(ws_bytes);
  std::optional<CodecRate> out;
  if (src && dst && ws) {
    backend_.init_tensor(t, arena_at(*src), 7);
    backend_.synchronize();
    // One size's best time per call and the bytes a call read and wrote: kCalls calls queued
    // back to back on the stream, then one wait (as a plan queues them; a lone call's time would
    // count the host's round trip, which the stream hides), compressions then decompressions.
    constexpr int kCalls = 4;
    const auto time = [&](size_t m) {
      TensorInfo u = t;
      u.shape = Shape{static_cast<int64_t>(m)};
      double best = -1;
      size_t moved = 0;
      for (int round = 0; round < 3; ++round) {
        std::array<CodecResult, kCalls> r{};
        const double t0 = backend_.now_ms();
        for (auto& x : r)
          backend_.compress_async(Stream::kCompress, Codec::kBitmask, u, arena_at(*src), arena_at(*dst),
                                  codec_bound(Codec::kBitmask, m), arena_at(*ws), ws_bytes, &x);
        backend_.synchronize();
        const auto packed = static_cast<size_t>(r[0].bytes);
        for (auto& x : r)
          backend_.decompress_async(Stream::kCompress, Codec::kBitmask, u, arena_at(*dst), packed, arena_at(*src), &x);
        backend_.synchronize();
        const double ms = (backend_.now_ms() - t0) / (2 * kCalls);
        if (best < 0 || ms < best) best = ms;
        moved = m * sizeof(float) + packed;
      }
      return std::make_pair(std::max(best, 0.0), moved);
    };
    const auto [small_ms, small_bytes] = time(n / 8);
    const auto [big_ms, big_bytes] = time(n);
    CodecRate c;
    c.probe_bytes = n * sizeof(float);
    // As the copies' calibration: under load the small call's best can exceed the large one's; the
    // rate is then the large call's whole time per byte.
    if (big_ms > small_ms && big_bytes > small_bytes) {
      c.ms_per_byte = (big_ms - small_ms) / static_cast<double>(big_bytes - small_bytes);
      c.latency_ms = std::max(0.0, small_ms - c.ms_per_byte * static_cast<double>(small_bytes));
    } else {
      c.ms_per_byte = big_ms / static_cast<double>(big_bytes);
    }
    if (c.ms_per_byte > 0) out = c;
  }
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) allocator_->free(*it);
  return out;
}

// ---------------------------------------------------------------- compression

bool MemoryManager::compress(TensorId id, Codec codec, size_t capacity, uint64_t release_seq, bool per_use_buffer) {
  id = storage_of(id);
  State& s = st(id);
  if (s.residency != Residency::kResident) throw std::logic_error("compress of a tensor that is " + std::string(to_string(s.residency)));
  if (codec == Codec::kNone) throw std::logic_error("compress of " + graph_.tensor(id).name + " without a codec");
  const TensorInfo& t = graph_.tensor(id);
  const auto n = static_cast<size_t>(t.shape.numel());
  capacity = std::max(capacity, codec_mask_bytes(n));
  const CompressionOptions& o = compression_;
  s.per_use_buffer = per_use_buffer;
  ++s.locks;  // not a victim while its blocks are found
  try {
    if (s.has_buffer && s.comp_capacity < capacity) free_buffer(s, true);  // the plan asks for more now
    if (!s.has_buffer) {
      s.comp_offset = alloc_block(capacity, -1, "compressed buffer");
      s.comp_capacity = capacity;
      s.has_buffer = true;
    }
    if (codec == Codec::kBitmask && o.sliding_workspace) {
      // One fixed workspace for the run: as large as this tensor's worst-case chunk needs, at most
      // workspace_bytes; it grows (once, in the first iterations) for a larger tensor.
      const size_t want = codec_chunk_workspace(std::min(codec_chunk_elements(o.workspace_bytes), (n + 31) / 32 * 32));
      if (has_sliding_ && sliding_bytes_ < want) {
        while (finish_oldest_compress()) {  // nothing may be using it
        }
        allocator_->free(sliding_offset_);
        has_sliding_ = false;
      }
      if (!has_sliding_) {
        sliding_offset_ = alloc_block(want, -1, "sliding compression workspace");
        sliding_bytes_ = want;
        has_sliding_ = true;
      }
    } else if (codec == Codec::kBitmask) {
      s.ws_offset = alloc_block(codec_chunk_workspace((n + 31) / 32 * 32), -1, "compression workspace");
      s.own_workspace = true;
    }
  } catch (const OutOfMemoryError&) {
    --s.locks;
    free_buffer(s, false);
    ++counters_.compress_skipped;
    return false;
  }
  --s.locks;
  void* ws = nullptr;
  size_t ws_bytes = 0;
  if (s.own_workspace) ws = arena_at(s.ws_offset), ws_bytes = codec_chunk_workspace((n + 31) / 32 * 32);
  else if (codec == Codec::kBitmask) ws = arena_at(sliding_offset_), ws_bytes = sliding_bytes_;
  const Stream cs = o.on_compute_stream ? Stream::kCompute : Stream::kCompress;
  if (cs != Stream::kCompute) backend_.stream_wait(cs, backend_.record(Stream::kCompute));  // the producer has finished
  s.result = {};
  backend_.compress_async(cs, codec, t, device_ptr(id), arena_at(s.comp_offset), s.comp_capacity, ws, ws_bytes, &s.result);
  s.event = backend_.record(cs);
  s.codec = codec;
  s.residency = Residency::kCompressing;
  s.release_seq = release_seq;
  compressing_.push_back(id);
  log_move(Move::Kind::kCompress, id);
  return true;
}

void MemoryManager::complete_compress(TensorId id) {
  State& s = st(id);
  wait_copy(s);
  compressing_.erase(std::find(compressing_.begin(), compressing_.end(), id));
  free_own_workspace(s);
  s.stat.id = id;
  s.stat.codec = s.codec;
  s.stat.bytes_before = s.bytes;
  s.stat.bytes_after = s.result.bytes;
  s.stat.capacity = s.comp_capacity;
  s.stat.compress_ms += s.result.ms;
  counters_.compress_ms += s.result.ms;
  if (s.result.bytes > s.comp_capacity) {  // denser than planned: keep it as it is
    ++s.stat.overflows;
    ++counters_.compress_overflows;
    free_buffer(s, false);
    s.residency = Residency::kResident;
    s.codec = Codec::kNone;
    if (s.released && s.lineage_refs == 0) destroy(id);
    return;
  }
  ++s.stat.compressions;
  ++counters_.compressions;
  counters_.compressed_bytes += s.bytes;
  counters_.compressed_to_bytes += s.result.bytes;
  s.comp_bytes = s.result.bytes;
  free_device(s);
  s.residency = Residency::kCompressed;
  if (s.released && s.lineage_refs == 0) destroy(id);
}

void MemoryManager::cancel_compress(TensorId id) {
  State& s = st(id);
  wait_copy(s);
  compressing_.erase(std::find(compressing_.begin(), compressing_.end(), id));
  free_own_workspace(s);
  free_buffer(s, false);
  s.residency = Residency::kResident;
  s.codec = Codec::kNone;
}

void MemoryManager::decompress(TensorId id) {
  id = storage_of(id);
  State& s = st(id);
  if (s.residency != Residency::kCompressed) throw std::logic_error("decompress of a tensor that is " + std::string(to_string(s.residency)));
  ++s.locks;
  s.offset = alloc_block(s.bytes, id, "decompression");
  s.placed_seq = s.persistent ? ++placements_ : 0;
  --s.locks;
  const Stream cs = compression_.on_compute_stream ? Stream::kCompute : Stream::kCompress;
  if (cs != Stream::kCompute) backend_.stream_wait(cs, backend_.record(Stream::kCompute));  // the block's last user has finished
  s.result = {};
  backend_.decompress_async(cs, s.codec, graph_.tensor(id), arena_at(s.comp_offset), s.comp_bytes, arena_at(s.offset), &s.result);
  s.event = backend_.record(cs);
  log_move(Move::Kind::kPrefetch, id);
  s.residency = Residency::kDecompressing;
  ++counters_.decompressions;
}

void MemoryManager::finish_decompress(TensorId id) {
  State& s = st(id);
  wait_copy(s);
  s.stat.decompress_ms += s.result.ms;
  counters_.decompress_ms += s.result.ms;
  free_buffer(s, false);
  s.residency = Residency::kResident;
  s.codec = Codec::kNone;
}

void MemoryManager::finish_compressions_due(uint64_t op_seq) {
  for (auto it = compressing_.begin(); it != compressing_.end();) {
    const TensorId id = *it;
    if (st(id).release_seq > op_seq) {
      ++it;
      continue;
    }
    complete_compress(id);  // erases it
    it = compressing_.begin();
  }
}

bool MemoryManager::finish_oldest_compress() {
  if (compressing_.empty()) return false;
  complete_compress(compressing_.front());
  return true;
}

void MemoryManager::free_buffer(State& s, bool even_persistent) {
  if (!s.has_buffer || (compression_.persistent_buffers && !s.per_use_buffer && !even_persistent)) return;
  allocator_->free(s.comp_offset);
  s.has_buffer = false;
  s.comp_capacity = 0;
}

bool MemoryManager::drop_compressed(size_t bytes) {
  std::vector<TensorId> cands;
  for (size_t i = 0; i < states_.size(); ++i)
    if (states_[i].residency == Residency::kCompressed && states_[i].locks == 0) cands.push_back(static_cast<TensorId>(i));
  std::sort(cands.begin(), cands.end(), [&](TensorId a, TensorId b) {
    return st(a).last_access != st(b).last_access ? st(a).last_access < st(b).last_access : a < b;
  });
  size_t freed = 0;
  for (TensorId id : cands) {
    if (freed >= bytes) break;
    if (!can_recompute(id)) continue;
    freed += st(id).comp_capacity;
    drop(id);
    ++counters_.evictions;
  }
  return freed > 0;
}

bool MemoryManager::release_idle_buffers() {
  bool any = false;
  for (auto& s : states_) {
    if (!s.has_buffer || s.residency == Residency::kCompressing || s.residency == Residency::kCompressed ||
        s.residency == Residency::kDecompressing)
      continue;
    free_buffer(s, true);
    ++counters_.buffers_released;
    any = true;
  }
  if (has_sliding_ && compressing_.empty()) {  // the sliding workspace too, when no codec uses it
    allocator_->free(sliding_offset_);
    has_sliding_ = false;
    ++counters_.buffers_released;
    any = true;
  }
  return any;
}

void MemoryManager::free_own_workspace(State& s) {
  if (!s.own_workspace) return;
  allocator_->free(s.ws_offset);
  s.own_workspace = false;
}

std::optional<size_t> MemoryManager::count_nonzeros(TensorId id) const {
  id = storage_of(id);
  const State& s = st(id);
  if (s.residency != Residency::kResident && s.residency != Residency::kSwappingOut) return std::nullopt;
  const TensorInfo& t = graph_.tensor(id);
  auto n = backend_.count_nonzeros(t, device_ptr(id));
  if (n && backend_.has_data()) measured_.tensors[density_key(t)] = {static_cast<uint64_t>(t.shape.numel()), *n};
  return n;
}

std::vector<CompressionStat> MemoryManager::compression_stats() const {
  std::vector<CompressionStat> out;
  for (const auto& s : states_)
    if (s.stat.id != kNoTensor) out.push_back(s.stat);
  return out;
}

}  // namespace vtensor
