#include "vtensor/backend/cuda/op_timer.h"

#include <cupti.h>

#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace vtensor::cuda {

namespace {

constexpr CUpti_ExternalCorrelationKind kOpKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
constexpr size_t kBufferBytes = size_t{8} << 20;
constexpr size_t kAlign = 8;
// The kinds whose records time an op's work, and the ones that attribute it.
constexpr CUpti_ActivityKind kWorkKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                             CUPTI_ACTIVITY_KIND_MEMSET};
constexpr CUpti_ActivityKind kApiKinds[] = {CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER,
                                            CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};

struct Work {
  uint32_t correlation;
  uint64_t ns;
};

// The records CUPTI hands back, from whichever thread it completes a buffer on.
struct Records {
  std::mutex mu;
  std::vector<Work> work;
  std::unordered_map<uint32_t, uint64_t> op_of;  // correlation id -> op index + 1
  uint64_t dropped = 0;
};
// Never destroyed: CUPTI may complete a buffer while the process exits.
Records& records() {
  static Records* r = new Records;
  return *r;
}

// A kernel, memcpy or memset record: its correlation id and its time on the device.
template <typename Record>
void add_work(Records& r, const CUpti_Activity* rec) {
  const auto* w = reinterpret_cast<const Record*>(rec);
  r.work.push_back({w->correlationId, w->end - w->start});
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlign, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t size, size_t valid) {
  Records& r = records();
  std::lock_guard<std::mutex> lock(r.mu);
  CUpti_Activity* rec = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL:
        add_work<CUpti_ActivityKernel10>(r, rec);
        break;
      case CUPTI_ACTIVITY_KIND_MEMCPY:
        add_work<CUpti_ActivityMemcpy6>(r, rec);
        break;
      case CUPTI_ACTIVITY_KIND_MEMSET:
        add_work<CUpti_ActivityMemset4>(r, rec);
        break;
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(rec);
        if (e->externalKind == kOpKind) r.op_of[e->correlationId] = e->externalId;
        break;
      }
      default:
        break;
    }
  }
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS) r.dropped += dropped;
  std::free(buffer);
}

std::string result_string(CUptiResult e) {
  const char* s = nullptr;
  cuptiGetResultString(e, &s);
  return s ? s : "unknown CUPTI error";
}

}  // namespace

bool OpTimer::start() {
  if (active_) return true;
  static std::once_flag registered;
  static CUptiResult registration = CUPTI_SUCCESS;
  std::call_once(registered, [] { registration = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed); });
  if (registration != CUPTI_SUCCESS) {
    why_ = "cuptiActivityRegisterCallbacks: " + result_string(registration);
    return false;
  }
  {
    Records& r = records();
    std::lock_guard<std::mutex> lock(r.mu);
    r.work.clear();
    r.op_of.clear();
    r.dropped = 0;
  }
  // All or nothing: a kind that cannot be enabled leaves none enabled.
  std::vector<CUpti_ActivityKind> enabled;
  for (const auto* kinds : {&kApiKinds, &kWorkKinds})
    for (CUpti_ActivityKind k : *kinds) {
      if (CUptiResult e = cuptiActivityEnable(k); e != CUPTI_SUCCESS) {
        why_ = "cuptiActivityEnable(" + std::to_string(static_cast<int>(k)) + "): " + result_string(e);
        for (CUpti_ActivityKind a : enabled) cuptiActivityDisable(a);
        return false;
      }
      enabled.push_back(k);
    }
  active_ = true;
  return true;
}

void OpTimer::push(int op_index) {
  if (active_) cuptiActivityPushExternalCorrelationId(kOpKind, static_cast<uint64_t>(op_index) + 1);
}

void OpTimer::pop() {
  uint64_t last = 0;
  if (active_) cuptiActivityPopExternalCorrelationId(kOpKind, &last);
}

std::vector<double> OpTimer::stop(size_t num_ops) {
  if (!active_) return {};
  active_ = false;
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  for (CUpti_ActivityKind k : kWorkKinds) cuptiActivityDisable(k);
  for (CUpti_ActivityKind k : kApiKinds) cuptiActivityDisable(k);
  Records& r = records();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.dropped) {
    why_ = "CUPTI dropped " + std::to_string(r.dropped) + " records";
    return {};
  }
  std::vector<double> ms(num_ops, 0.0);
  size_t attributed = 0;
  for (const Work& w : r.work) {
    const auto it = r.op_of.find(w.correlation);
    if (it == r.op_of.end() || it->second == 0 || it->second > num_ops) continue;  // not an op's launch
    ms[it->second - 1] += static_cast<double>(w.ns) * 1e-6;
    ++attributed;
  }
  const size_t records = r.work.size();
  r.work.clear();
  r.op_of.clear();
  if (num_ops && !attributed) {  // nothing tied to an op: no times rather than all zeros
    why_ = "none of " + std::to_string(records) + " device records was attributed to an op";
    return {};
  }
  return ms;
}

}  // namespace vtensor::cuda
