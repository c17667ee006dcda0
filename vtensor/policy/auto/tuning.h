// Policy auto's tuning constants, in one place: how much it rehearses, where it stops, and
// what its planning clock counts. Each line says what it trades; docs/design.md and
// docs/experiments/auto.md give the measurements behind the values.
#pragma once
#include <cstddef>

namespace vtensor {

// ---------------------------------------------------------------- rehearsals

// The iterations a rehearsal runs: the measured one and three guided ones (as the benchmarks run).
constexpr int kRehearsedIterations = 4;
// Capuchin's trigger feedback runs in the guided iterations but the last; left running it kept
// moving triggers, each move holding memory the plan had not counted.
constexpr int kFeedbackIterations = kRehearsedIterations - 2;
// The sim GPU a cpu / cuda run's rehearsals model what the measurement does not give (compaction moves).
constexpr const char* kRehearsalGpu = "h100-80g";
// Rehearsals run at once, at most (fewer on fewer cores): planning time against memory.
constexpr unsigned kMaxRehearsalThreads = 4;

// ---------------------------------------------------------------- candidates

// The fractions of the budget the Capuchin modes also plan for: headroom for what the plan's
// byte count leaves out (fragmentation, recomputations' working sets).
constexpr const char* kPlanFractions[] = {"0.97", "0.94", "0.9", "0.85"};
// The hybrid's swap-stall weights tried beside Capuchin's 1.
constexpr const char* kSwapCostWeights[] = {"0.25", "4", "16"};
// The fastest Capuchin candidates rehearsed again with wrap swaps (a whole-plan choice: a few, not all).
constexpr size_t kWrapCandidates = 8;

// ---------------------------------------------------------------- the linear program's starts

// The LP's optimum rounded at each threshold (a gap moved where the LP moves at least that much of
// it); 0.3 rather than 1/2: the pins cover more of what the LP frees, and the climbs end lower.
inline constexpr double kLpThresholds[] = {0.3};
// The fastest Capuchin candidates without wrap swaps the LP's pins are rehearsed on (then the fastest with them).
constexpr size_t kLpStarts = 2;
// The default count of those rehearsals (--auto-lp): more starts against search time.
constexpr int kDefaultLpRehearsals = 3;

// ---------------------------------------------------------------- the starts

// The starts' plan fraction refined by these: more starts against rehearsals.
inline constexpr double kStartHeadroomSteps[] = {-0.03, -0.02, -0.01, 0.01, 0.02, 0.03};
// The hybrid's swap-stall weight refined by these factors, likewise.
inline constexpr double kStartWeightFactors[] = {0.5, 2};
// The ",large-wraps" starts rehearsed, at most: a row whose rehearsals are slow has no time left to climb.
constexpr size_t kLargeWrapStarts = 4;

// ---------------------------------------------------------------- the search

// Where planning stops: the candidates' limit, then this much more for the search (ms on the clock).
constexpr double kDefaultTimeLimitMs = 8000;
constexpr double kSearchTimeMs = 1300;
// The climb's, window search's and "make room" moves' rehearsals, at most.
constexpr int kDefaultSearchRehearsals = 256;
constexpr int kDefaultWindowRehearsals = 256;
constexpr int kDefaultRoomRehearsals = 144;
// Each start's first round, in rehearsals: a look at every start against depth on the best.
constexpr int kDefaultFirstRoundRehearsals = 32;
// The first round's share of the search's time; then the kResumedClimbs lowest share the rest.
constexpr double kFirstRoundShare = 0.4;
constexpr size_t kResumedClimbs = 2;
// Rehearsals run at once per round of the climb: parallelism against moves taken one at a time.
constexpr size_t kSearchBatch = 4;
// The smallest gain that counts (relative): keeps the search from chasing rounding.
constexpr double kMinGain = 1e-5;
// A gap that cost less (ms) is not worth a move.
constexpr double kMinCostMs = 1e-3;
// A move that lost this many times is not tried again: the budget goes to the untried.
constexpr int kMaxLosses = 4;
// The compression moves' rehearsals after the keep / swap / recompute climb ends.
constexpr int kCompressRehearsals = 128;
// The climb's headroom moves: the plan fraction changed by these, at most kHeadroomRounds times a climb.
inline constexpr double kHeadroomSteps[] = {-0.04, -0.02, 0.02, 0.04};
constexpr int kHeadroomRounds = 3;
// The window search: gaps per window, combinations per window, anchors tried without a gain.
constexpr size_t kWindowGaps = 4;
constexpr size_t kWindowCombos = 64;
constexpr size_t kWindowAnchors = 8;
// The "make room" moves: the costliest swaps they start from, how much earlier their prefetch
// goes, and the largest kept tensors tried as the room.
constexpr size_t kRoomAnchors = 3;
inline constexpr int kRoomShifts[] = {2, 4, 8};
constexpr size_t kRoomPartners = 8;

// ---------------------------------------------------------------- the finish

// The iterations of the long runs that choose the start state: a drift after the fourth decides too.
constexpr int kLongRunIterations = 10;
// A long run this much slower than the search saw has drifted: then up to kLongRunFinalists other
// plans within kFinalistSlack of its time run long too, and the fastest there runs.
constexpr double kLongRunDrift = 0.01;
constexpr int kLongRunFinalists = 2;
constexpr double kFinalistSlack = 0.02;
// What those rehearsals cost, in search rehearsals (a long one about 2.5; two at a time), with
// margin: kept out of the search's time.
constexpr double kStartStateRehearsals = 2 * 2.5 * (1 + kLongRunFinalists) + 1.5;
// The warm start's: three variants, each rehearsed short and long, two at a time.
constexpr double kWarmStartRehearsals = 3 * (1 + 2.5) / 2;
// The search's ends finished (start state and warm start each): a short rehearsal does not say how
// a plan settles; each past the first costs kFinishRehearsals.
constexpr size_t kFinishedPlans = 4;
constexpr double kFinishRehearsals = 2 * 2.5 + 1.5 + kWarmStartRehearsals;
// The finish's high placements: requests of each fraction of the budget and over (each won on some row).
inline constexpr double kHighPlacementFractions[] = {0.02, 0.05, 0.1};
// The fastest candidates the summary names (the report has all).
constexpr size_t kSummaryCandidates = 4;

// ---------------------------------------------------------------- the planning clock

// The rehearsals clock's rates, fitted on this project's machines and scaled 1.5x so the slowest
// rehearsal for its counts takes 0.9 of its count (bench/fit_clock.py): per op of each iteration,
// per recomputed op, per compaction, per eviction and tensor of the graph (ns).
constexpr double kClockNsPerOp = 2000;
constexpr double kClockNsPerRecompute = 12000;
constexpr double kClockNsPerCompaction = 14000;
constexpr double kClockNsPerEvictionTensor = 8;
// Rehearsals counted at once, as the 2-core machines run them.
constexpr double kClockWorkers = 2;
// A rehearsal is cut only past this many times its count and this much wall time: a thrashing plan
// would run for minutes; only such a cut depends on the machine.
constexpr double kClockNetFactor = 20;
constexpr double kClockNetMinMs = 1000;
// The wall cap's slack over the planning limits (ms): a loaded machine still plans in about the limits.
constexpr double kWallCapSlackMs = 200;

}  // namespace vtensor
