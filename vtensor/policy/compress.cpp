#include "vtensor/policy/compress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "vtensor/backend/codec.h"
#include "vtensor/memory/allocator.h"
#include "vtensor/policy/lru.h"

namespace vtensor {
namespace {

constexpr double kEpsNs = 1e-3;

TensorId base_of(const Graph& g, TensorId id) {
  while (g.tensor(id).view_of != kNoTensor) id = g.tensor(id).view_of;
  return id;
}

// What a lossy codec may take (--lossy): any forward activation of floats.
bool lossy_compressible(const Graph& g, TensorId id) {
  const TensorInfo& t = g.tensor(id);
  if (t.persistent() || t.producer < 0 || t.view_of != kNoTensor || t.dtype != DType::kF32 || t.bytes() == 0) return false;
  const Op& op = g.op(t.producer);
  return !op.backward && !op.optimizer && op.kind != OpKind::kData && op.kind != OpKind::kTokenData;
}

// Does op `o` read tensor `id` only as a ReLU backward's y (it needs y > 0, nothing more)?
bool reads_sign_only(const Graph& g, int o, TensorId id) {
  const Op& op = g.op(o);
  if (op.kind != OpKind::kReluBwd) return false;
  for (size_t i = 0; i < op.inputs.size(); ++i)
    if (base_of(g, op.inputs[i]) == id && i != 1) return false;
  for (TensorId out : op.outputs)
    if (base_of(g, out) == id) return false;
  return true;
}

// The lossless codec for a gap whose later readers are `later_ops` (unaligned capacity; kNone:
// none applies).
GapCodec lossless_codec(const Graph& g, TensorId id, const std::vector<int>& later_ops, std::optional<size_t> nnz,
                        const CompressionOptions& o) {
  GapCodec c;
  const size_t n = g.tensor(id).bytes() / 4;
  bool sign = o.sign;
  for (int op : later_ops) sign = sign && reads_sign_only(g, op, id);
  if (sign) {
    c.codec = Codec::kSign;
    c.compressed = c.capacity = codec_bytes(Codec::kSign, n, 0);
  } else if (o.bitmask && nnz) {
    c.codec = Codec::kBitmask;
    c.compressed = codec_bytes(Codec::kBitmask, n, *nnz);
    const auto room = static_cast<size_t>(std::ceil(static_cast<double>(*nnz) * (1.0 + kValueSlack)));
    c.capacity = codec_bytes(Codec::kBitmask, n, std::min(n, room));
  }
  return c;
}

class Planner {
 public:
  Planner(const Graph& g, const CompressPlanInput& in) : g_(g), in_(in), b_(in.base) {}

  CompressPlan run() {
    measure();
    out_.memory_before = mem_;
    out_.peak_before = peak();
    find_candidates();
    choose();
    out_.peak_after_compress = peak();
    if (in_.rest && !fits()) plan_the_rest(*in_.rest);
    out_.memory_after = mem_;
    out_.peak_after = peak();
    out_.fits = out_.peak_after <= b_.budget;
    sort_actions(out_.plan);
    return std::move(out_);
  }

 private:
  size_t n_ops() const { return static_cast<size_t>(b_.num_ops); }
  size_t peak() const { return curve_peak(mem_); }
  bool fits() const { return peak() <= b_.budget; }
  double excess() const { return curve_excess(mem_, b_.budget); }
  bool hits_over(int first, int last) const { return curve_over(mem_, b_.budget, first, last); }
  void add_mem(std::vector<size_t>& m, int first, int last, long long delta) const { curve_add(m, first, last, delta); }

  // Op start times (measured kernel times end to end), access ops per tensor, the curve:
  // the same reading of the trace as Capuchin's planner.
  void measure() {
    const size_t n = n_ops(), nt = b_.tensors.size();
    start_.assign(n + 1, 0);
    ops_of_.assign(nt, {});
    std::vector<int> first(nt, -1), last(nt, -1);
    std::vector<double> t_first(n, -1);
    double t_end = 0;
    for (const auto& a : b_.accesses) {
      if (!is_use(a.kind)) continue;
      if (a.op_index < 0 || static_cast<size_t>(a.op_index) >= n || static_cast<size_t>(a.id) >= nt)
        throw std::invalid_argument("access trace does not match the graph");
      const auto id = static_cast<size_t>(a.id);
      if (first[id] < 0) first[id] = a.op_index;
      last[id] = std::max(last[id], a.op_index);
      if (ops_of_[id].empty() || ops_of_[id].back() != a.op_index) ops_of_[id].push_back(a.op_index);
      double& s = t_first[static_cast<size_t>(a.op_index)];
      s = s < 0 ? static_cast<double>(a.time_ns) : std::min(s, static_cast<double>(a.time_ns));
      t_end = std::max(t_end, static_cast<double>(a.time_ns));
    }
    if (b_.op_ns.size() == n) {
      for (size_t i = 0; i < n; ++i) start_[i + 1] = start_[i] + b_.op_ns[i];
    } else {
      for (size_t i = 0; i < n; ++i) start_[i] = std::max(t_first[i], i ? start_[i - 1] : 0.0);
      start_[n] = std::max(t_end, n ? start_[n - 1] : 0.0);
    }
    size_t persistent = 0;
    for (const auto& t : b_.tensors)
      if (t.persistent) persistent += t.bytes;
    mem_.assign(n, persistent);
    for (size_t id = 0; id < nt; ++id) {
      if (b_.tensors[id].persistent || first[id] < 0) continue;
      const int l = std::max(last[id], std::min(b_.tensors[id].release_after, static_cast<int>(n) - 1));
      add_mem(mem_, first[id], l, static_cast<long long>(b_.tensors[id].bytes));
    }
    if (b_.workspace_bytes.size() == n)
      for (size_t i = 0; i < n; ++i) mem_[i] += b_.workspace_bytes[i];
    out_.element_ns_per_byte = element_ns_per_byte(g_, b_.op_ns);
  }

  void find_candidates() {
    const Codec lossy = in_.options.lossy;
    for (size_t id = 0; id < b_.tensors.size(); ++id) {
      const auto tid = static_cast<TensorId>(id);
      const bool sparse = compressible(g_, tid), lossy_ok = lossy != Codec::kNone && lossy_compressible(g_, tid);
      if (!sparse && !lossy_ok) continue;
      const auto& ops = ops_of_[id];
      const size_t bytes = b_.tensors[id].bytes, n = bytes / 4;
      for (size_t k = 0; k + 1 < ops.size(); ++k) {
        const int e = ops[k], b = ops[k + 1];
        if (b < e + 2 || !hits_over(e + 1, b - 1)) continue;
        bool backward_only = true;
        for (size_t j = k + 1; j < ops.size(); ++j) backward_only = backward_only && g_.op(ops[j]).backward;
        CompressCandidate c;
        c.id = tid;
        c.bytes = bytes;
        c.evict_op = e;
        c.back_op = b;
        if (sparse) {
          const auto l = lossless_codec(g_, tid, std::vector<int>(ops.begin() + static_cast<std::ptrdiff_t>(k) + 1, ops.end()),
                                        id < in_.nonzeros.size() ? in_.nonzeros[id] : std::nullopt, in_.options);
          c.codec = l.codec, c.compressed = l.compressed, c.capacity = l.capacity;
        }
        // Lossy only where no lossless codec saves enough, and only for backward readers: the
        // forward pass always sees exact values.
        if ((c.codec == Codec::kNone || static_cast<double>(align_up(c.capacity)) > (1.0 - kMinSaving) * static_cast<double>(bytes)) &&
            lossy_ok && backward_only) {
          c.codec = lossy;
          c.compressed = c.capacity = codec_bytes(lossy, n, 0);
        }
        if (c.codec == Codec::kNone) continue;
        c.capacity = align_up(c.capacity);
        if (static_cast<double>(c.capacity) > (1.0 - kMinSaving) * static_cast<double>(bytes)) continue;
        const double rate = out_.element_ns_per_byte;
        c.compress_ns = rate * static_cast<double>(bytes + c.compressed);
        c.decompress_ns = rate * static_cast<double>(bytes + c.compressed);
        out_.candidates.push_back(c);
      }
    }
  }

  // Largest saving first; a choice is kept only if it lowers the bytes over the budget. The
  // sliding workspace is one block for the run: charged up front (not to the first choice
  // alone), taken back if no bitmask compression is chosen.
  void choose() {
    std::vector<size_t> order(out_.candidates.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      const auto& x = out_.candidates[a];
      const auto& y = out_.candidates[b];
      return x.bytes - x.capacity > y.bytes - y.capacity;
    });
    if (in_.options.sliding_workspace)
      for (const auto& c : out_.candidates)
        if (c.codec == Codec::kBitmask) sliding_ = std::max(sliding_, sliding_workspace(c.bytes / 4));
    add_mem(mem_, 0, b_.num_ops - 1, static_cast<long long>(sliding_));
    for (size_t k : order) {
      if (fits()) break;
      auto& c = out_.candidates[k];
      if (!hits_over(c.evict_op + 1, c.back_op - 1)) continue;
      try_take(c);
    }
    const bool any = std::any_of(out_.candidates.begin(), out_.candidates.end(),
                                 [](const CompressCandidate& c) { return c.chosen && c.codec == Codec::kBitmask; });
    if (!any) add_mem(mem_, 0, b_.num_ops - 1, -static_cast<long long>(sliding_)), sliding_ = 0;
    out_.workspace_bytes = sliding_;
  }

  // The memory manager's sliding workspace for a tensor of n elements (aligned as allocated).
  size_t sliding_workspace(size_t n) const {
    return align_up(codec_chunk_workspace(std::min(codec_chunk_elements(in_.options.workspace_bytes), (n + 31) / 32 * 32)));
  }

  bool try_take(CompressCandidate& c) {
    const CompressionOptions& o = in_.options;
    const int e = c.evict_op, b = c.back_op;
    // Compression: after op e on the lane (or on the compute stream, where it delays op e + 1).
    const double ready = start_[static_cast<size_t>(e) + 1];
    const double cs = o.on_compute_stream ? ready : lane_.earliest_fit(ready, c.compress_ns);
    int release = capuchin_release_op(start_, e, cs + c.compress_ns);
    if (o.on_compute_stream) release = e + 1;
    if (release < 0 || release + 1 > b - 1) return false;
    // In-trigger: back from the back-access until the decompression hides; not into the peak
    // window (ops where the tensor back would exceed the budget), not before the release.
    auto d_start = [&](int p) {
      const double t = start_[static_cast<size_t>(p) + 1];
      return o.on_compute_stream ? t : lane_.earliest_fit(std::max(t, cs + c.compress_ns), c.decompress_ns);
    };
    const int p = walk_back_trigger(b - 1, release + 1, [&](int q) { return d_start(q) + c.decompress_ns; },
                                    start_[static_cast<size_t>(b)], mem_, b_.budget);
    const std::vector<size_t> before = mem_;
    const double over = excess();
    add_mem(mem_, release + 1, p, -static_cast<long long>(c.bytes));
    if (o.persistent_buffers) add_mem(mem_, 0, b_.num_ops - 1, static_cast<long long>(c.capacity));
    else add_mem(mem_, e + 1, b - 1, static_cast<long long>(c.capacity));
    if (c.codec == Codec::kBitmask && !o.sliding_workspace)
      add_mem(mem_, e + 1, release, static_cast<long long>(align_up(codec_chunk_workspace((c.bytes / 4 + 31) / 32 * 32))));
    const size_t peak_before = *std::max_element(before.begin(), before.end());
    if (excess() >= over || peak() > peak_before) {
      mem_ = before;
      return false;
    }
    if (!o.on_compute_stream) lane_.add(cs, c.compress_ns);
    const double ds = d_start(p);
    if (!o.on_compute_stream) lane_.add(ds, c.decompress_ns);
    c.release_op = release;
    c.trigger_op = p;
    c.stall_ns = std::max(0.0, ds + c.decompress_ns - start_[static_cast<size_t>(b)]);
    c.chosen = true;
    c.order = order_++;
    Action a{ActionKind::kCompress, c.id, e, release};
    a.codec = c.codec;
    a.capacity = c.capacity;
    out_.plan.actions.push_back(a);
    out_.plan.actions.push_back({ActionKind::kPrefetch, c.id, p});
    return true;
  }

  // compress+swap / compress+capuchin: Capuchin's planner (swap or hybrid mode) on the curve
  // compression leaves, without the tensors compression already handles.
  void plan_the_rest(CapuchinMode mode) {
    PlannerInput in = b_;
    in.memory_delta.assign(n_ops(), 0);
    for (size_t i = 0; i < n_ops(); ++i)
      in.memory_delta[i] = static_cast<long long>(mem_[i]) - static_cast<long long>(out_.memory_before[i]);
    for (const auto& c : out_.candidates)
      if (c.chosen) in.tensors[static_cast<size_t>(c.id)].excluded = true;
    out_.swaps = plan_capuchin(in, mode);
    for (const Action& a : out_.swaps.plan.actions) out_.plan.actions.push_back(a);
    if (!out_.swaps.memory_after.empty()) mem_ = out_.swaps.memory_after;
  }

  const Graph& g_;
  const CompressPlanInput& in_;
  const PlannerInput& b_;
  CompressPlan out_;
  std::vector<double> start_;
  std::vector<std::vector<int>> ops_of_;
  std::vector<size_t> mem_;
  CopyLane lane_;
  size_t sliding_ = 0;
  int order_ = 0;
};

}  // namespace

bool compressible(const Graph& g, TensorId id) {
  const TensorInfo& t = g.tensor(id);
  if (t.persistent() || t.producer < 0 || t.view_of != kNoTensor || t.dtype != DType::kF32 || t.bytes() == 0) return false;
  const OpKind k = g.op(t.producer).kind;
  return k == OpKind::kRelu || k == OpKind::kMaxPool;
}

double element_ns_per_byte(const Graph& g, const std::vector<double>& op_ns) {
  double ns = 0, bytes = 0;
  for (const Op& op : g.ops())
    if (op.kind == OpKind::kRelu && op_ns.size() == g.num_ops()) {
      ns += op_ns[static_cast<size_t>(op.index)];
      bytes += 2.0 * static_cast<double>(g.tensor(op.outputs[0]).bytes());
    }
  return bytes > 0 ? ns / bytes : 0;
}

std::optional<GapCodec> gap_codec(const Graph& g, TensorId id, const std::vector<int>& later_ops,
                                  std::optional<size_t> nonzeros, const CompressionOptions& o, double element_ns_per_byte) {
  if (!compressible(g, id)) return std::nullopt;
  GapCodec c = lossless_codec(g, id, later_ops, nonzeros, o);
  const size_t bytes = g.tensor(id).bytes();
  if (c.codec == Codec::kNone) return std::nullopt;
  c.capacity = align_up(c.capacity);
  if (static_cast<double>(c.capacity) > (1.0 - kMinSaving) * static_cast<double>(bytes)) return std::nullopt;
  c.codec_ns = element_ns_per_byte * static_cast<double>(bytes + c.compressed);
  return c;
}

CompressPlan plan_compress(const Graph& g, const CompressPlanInput& in) {
  if (in.base.tensors.empty() || in.base.num_ops <= 0) return {};
  return Planner(g, in).run();
}

// ---------------------------------------------------------------- the policy

std::string CompressPolicy::name() const {
  if (!rest_) return "compress";
  return *rest_ == CapuchinMode::kSwap ? "compress+swap" : *rest_ == CapuchinMode::kHybrid ? "compress+capuchin" : "compress+capuchin-recompute";
}

std::vector<Action> CompressPolicy::after_op(int op_index) {
  if (!view_ || op_index < 0) return {};
  if (cycle_.guided()) return cycle_.actions_after(op_index);
  // Measured iteration: how dense each compressible output is, while it is on the device.
  const Graph& g = view_->graph();
  nonzeros_.resize(g.num_tensors());
  for (TensorId out : g.op(op_index).outputs)
    if (compressible(g, out)) nonzeros_[static_cast<size_t>(out)] = view_->count_nonzeros(out);
  return {};
}

std::vector<Victim> CompressPolicy::choose_victims(size_t bytes, const MemoryView& view) {
  // Passive (measured iteration) and the last resort of guided ones: least recently used,
  // swapped. Also when a plan that fits meets a fragmented arena: swapping is the fallback the
  // run can always take, compaction (which moves compressed buffers too) comes when it has none.
  // compress+capuchin does as Capuchin: with a plan that fits, a request within the budget is
  // fragmentation, compacted rather than swapped (its recomputations' inputs would otherwise be
  // swapped out under them).
  if (rest_ == CapuchinMode::kHybrid && cycle_.guided() && plan_.fits && view.allocated() + bytes <= view.budget()) return {};
  return lru_swap_victims(view, bytes);
}

void CompressPolicy::index_plan() { cycle_.index(plan_.plan, view_->graph().num_ops()); }

void CompressPolicy::end_iteration(const AccessTrace& trace) {
  if (!view_) throw std::logic_error("compress: end_iteration before attach");
  const MeasuredCycle::End end = cycle_.end_iteration(trace);
  if (end == MeasuredCycle::End::kChanged) return;
  if (end == MeasuredCycle::End::kGuided) {
    // Feedback: a decompression late at its back-access starts one op earlier next time, where
    // the tensor back still fits under the budget.
    for (size_t k = 0; k < plan_.candidates.size(); ++k) {
      auto& c = plan_.candidates[k];
      if (!late_[k] || !c.chosen || c.trigger_op <= c.release_op + 1) continue;
      auto& m = plan_.memory_after[static_cast<size_t>(c.trigger_op - 1)];
      if (m + c.bytes > view_->budget()) continue;
      m += c.bytes;
      for (auto& a : plan_.plan.actions)
        if (a.kind == ActionKind::kPrefetch && a.tensor == c.id && a.op == c.trigger_op) a.op = c.trigger_op - 1;
      --c.trigger_op;
      ++trigger_moves_;
    }
    std::fill(late_.begin(), late_.end(), 0);
    index_plan();
    return;
  }
  CompressPlanInput in;
  in.base = planner_input(view_->graph(), trace, planned_budget(*view_, plan_fraction_));
  in.base.workspace_bytes = allocated_workspaces(*view_);
  in.nonzeros = nonzeros_;
  in.nonzeros.resize(view_->graph().num_tensors());
  in.options = options_;
  in.rest = rest_;
  plan_ = plan_compress(view_->graph(), in);
  cycle_.planned();
  late_.assign(plan_.candidates.size(), 0);
  index_plan();
}

void CompressPolicy::on_restore(TensorId id, int op_index, Residency from, double waited_ms) {
  if (!cycle_.guided() || (from != Residency::kCompressed && !(from == Residency::kDecompressing && waited_ms > 0))) return;
  for (size_t k = 0; k < plan_.candidates.size(); ++k)
    if (plan_.candidates[k].chosen && plan_.candidates[k].id == id && plan_.candidates[k].back_op == op_index) late_[k] = 1;
}

nlohmann::json CompressPolicy::report() const {
  using nlohmann::json;
  json tensors = json::array();
  size_t before = 0, after = 0, capacity = 0;
  for (const auto& c : plan_.candidates) {
    if (c.chosen) before += c.bytes, after += c.compressed, capacity += c.capacity;
    tensors.push_back({{"tensor", c.id},
                       {"chosen", c.chosen},
                       {"name", view_ ? view_->graph().tensor(c.id).name : std::string()},
                       {"codec", to_string(c.codec)},
                       {"bytes", c.bytes},
                       {"measured_compressed_bytes", c.compressed},
                       {"buffer_bytes", c.capacity},
                       {"compress_after_op", c.evict_op},
                       {"freed_after_op", c.release_op},
                       {"decompress_after_op", c.trigger_op},
                       {"back_access_op", c.back_op},
                       {"predicted_codec_ms", (c.compress_ns + c.decompress_ns) * 1e-6},
                       {"predicted_stall_ms", c.stall_ns * 1e-6}});
  }
  json j = {{"mode", name()},
            {"guided", cycle_.guided()},
            {"measurements", cycle_.measurements()},
            {"sliding_workspace", options_.sliding_workspace},
            {"persistent_buffers", options_.persistent_buffers},
            {"on_compute_stream", options_.on_compute_stream},
            {"lossy", options_.lossy == Codec::kNone ? nlohmann::json(nullptr) : nlohmann::json(to_string(options_.lossy))},
            {"element_ns_per_byte", plan_.element_ns_per_byte},
            {"sliding_workspace_bytes", plan_.workspace_bytes},
            {"candidates", plan_.candidates.size()},
            {"compressed_tensors", static_cast<size_t>(std::count_if(plan_.candidates.begin(), plan_.candidates.end(),
                                                                     [](const CompressCandidate& c) { return c.chosen; }))},
            {"planned_bytes_before", before},
            {"planned_bytes_after", after},
            {"planned_buffer_bytes", capacity},
            {"predicted_peak_before_bytes", plan_.peak_before},
            {"predicted_peak_after_compress_bytes", plan_.peak_after_compress},
            {"predicted_peak_after_bytes", plan_.peak_after},
            {"predicted_fits", plan_.fits},
            {"trigger_moves", trigger_moves_},
            {"plan", plan_.plan.str()},
            {"tensors", tensors}};
  if (rest_) {
    size_t swaps = 0, swap_bytes = 0, drops = 0, drop_bytes = 0;
    for (const auto& c : plan_.swaps.candidates)
      if (c.decision == CapuchinDecision::kSwap) ++swaps, swap_bytes += c.bytes;
      else if (c.decision == CapuchinDecision::kRecompute) ++drops, drop_bytes += c.bytes;
    j["swapped_tensors"] = swaps;
    j["swap_bytes"] = swap_bytes;
    if (*rest_ != CapuchinMode::kSwap) j["recomputed_tensors"] = drops, j["recompute_bytes"] = drop_bytes;
  }
  if (plan_fraction_ != 1.0) j["plan_fraction"] = plan_fraction_;
  return j;
}

std::string CompressPolicy::summary() const {
  size_t n = 0, before = 0, after = 0, swaps = 0, swap_bytes = 0, drops = 0, drop_bytes = 0;
  for (const auto& c : plan_.candidates)
    if (c.chosen) ++n, before += c.bytes, after += c.capacity;
  for (const auto& c : plan_.swaps.candidates)
    if (c.decision == CapuchinDecision::kSwap) ++swaps, swap_bytes += c.bytes;
    else if (c.decision == CapuchinDecision::kRecompute) ++drops, drop_bytes += c.bytes;
  std::string rest;
  if (rest_) rest = ", swaps " + std::to_string(swaps) + " (" + std::to_string(swap_bytes / (1 << 20)) + " MiB)";
  if (rest_ && *rest_ != CapuchinMode::kSwap)
    rest += ", recomputes " + std::to_string(drops) + " (" + std::to_string(drop_bytes / (1 << 20)) + " MiB)";
  const double mib = 1024.0 * 1024.0;
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "%s: measured %d time(s); plan compresses %zu tensors (%.2f -> %.2f MiB in buffers)%s; predicted peak "
                "%.2f -> %.2f MiB%s",
                name().c_str(), cycle_.measurements(), n, static_cast<double>(before) / mib, static_cast<double>(after) / mib,
                rest.c_str(),
                static_cast<double>(plan_.peak_before) / mib, static_cast<double>(plan_.peak_after) / mib,
                plan_.fits ? "" : " (does not fit: passive eviction covers the rest)");
  return buf;
}

const std::vector<PolicyOption>& compress_options() {
  static const std::vector<PolicyOption> options = {
      {"codecs", "compress policies: codecs to use, comma-separated: bitmask, sign (default: both)"},
      {"lossy", "compress policies: opt-in lossy codec for what no lossless codec fits, read only by backward: bf16, fp16, "
                "int8 (default: none; losses then drift from `none`)"},
      {"no-sliding-workspace", "compress policies: a worst-case workspace per compression instead of one fixed sliding "
                               "workspace (ablation)", false, true},
      {"no-persistent-buffers", "compress policies: allocate each compressed buffer per use instead of once per tensor "
                                "(ablation)", false, true},
      {"compress-on-compute-stream", "compress policies: run the codecs on the compute stream (ablation: no overlap)",
       false, true},
  };
  return options;
}

std::unique_ptr<Policy> make_compress_policy(std::optional<CapuchinMode> rest, const PolicyOptions& o) {
  CompressionOptions c;
  if (o.given("codecs")) {
    c.bitmask = c.sign = false;
    const std::vector<std::string> codecs = o.list("codecs");
    if (codecs.empty()) parse_codec("");  // throws naming the accepted ones
    for (const std::string& name : codecs) (parse_codec(name) == Codec::kBitmask ? c.bitmask : c.sign) = true;
  }
  if (const auto lossy = o.text("lossy")) c.lossy = parse_lossy(*lossy);  // throws naming the accepted modes
  c.sliding_workspace = !o.given("no-sliding-workspace");
  c.persistent_buffers = !o.given("no-persistent-buffers");
  c.on_compute_stream = o.given("compress-on-compute-stream");
  auto p = std::make_unique<CompressPolicy>(rest);
  p->set_options(c);
  return p;
}

}  // namespace vtensor
