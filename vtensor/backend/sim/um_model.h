// The sim backend's unified-memory fault model (Backend::um_*). A kernel whose pages are not all
// on the device raises one fault batch: the compute stream stalls for
//   kUmFaultBatchUs + pages x kUmFaultPerPageUs            (driver: fault buffer, page tables, TLB)
//   + pages x page bytes / (link bandwidth x kUmDemandLinkEfficiency)  (the migrations, serial)
// A prefetch or pre-eviction is an asynchronous copy on its stream at kLinkEfficiency of the link
// (as explicit swaps), with no fault latency. A page that needs no copy (invalid, or evicted with
// a valid host copy) costs nothing to move. Residency is page-granular: the paged memory's frames.
// Sources, not calibrated on hardware here (no GPU in this build's sessions):
//  - fault batches of tens of microseconds: Zheng et al., "Towards High Performance Paged Memory
//    for GPUs", HPCA'16 (20-50 us far-fault latency); Allen and Ge, "Demystifying GPU UVM Cost with
//    Deep Runtime and Workload Analysis", IPDPS'21 (per-batch servicing dominates, batches of up
//    to 256 faults); we take 30 us per batch and 2 us per 2 MiB block within it.
//  - demand migration well below the link: Sakharnykh, "Maximizing Unified Memory Performance in
//    CUDA", NVIDIA developer blog, 2017 (fault-driven migration reaches a fraction of what
//    cudaMemPrefetchAsync reaches on the same link); we take 0.4 of the link against 0.8 for copies.
#pragma once

namespace vtensor {

constexpr double kUmFaultBatchUs = 30.0;
constexpr double kUmFaultPerPageUs = 2.0;
constexpr double kUmDemandLinkEfficiency = 0.4;

}  // namespace vtensor
