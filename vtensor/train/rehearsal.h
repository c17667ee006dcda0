// Rehearsal: one candidate planner run on the sim backend's model of a measured iteration, for
// policy auto (vtensor/policy/auto/). The same graph, memory manager, caching allocator, copy
// queues and compute stream as a run; kernel times and the host link from the measurement (or the
// run's own GPU model on sim). Device-free: nothing but virtual clocks.
#pragma once
#include "vtensor/policy/auto/rehearsal.h"

namespace vtensor {

// Runs `setup.iterations` iterations of policy auto forced to `candidate` (its measured
// iteration, then the candidate's guided ones). Out of memory (or any error) is a result
// (trained = false, error), not an exception.
RehearsalResult rehearse(const Candidate& candidate, const RehearsalSetup& setup);

}  // namespace vtensor
