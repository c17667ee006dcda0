// Reading recorded traces back as graphs that the sim backend can replay under any policy and
// budget. Two formats:
//  - vtensor's own access traces (AccessTracker::write_jsonl): the header lists every tensor and
//    op, so the graph is rebuilt exactly (same ids, sizes, lifetimes, phases); each op becomes an
//    OpKind::kReplay op carrying its recorded time (mean over the iterations after the first).
//  - DTR operator logs (Kirisame et al., ICLR'21; format in ../shared/external/dtr-logs/SOURCE.md):
//      CONSTANT + MEMORY   a persistent tensor (weights, inputs) of that many bytes;
//      CALL + MEMORY/ALIAS an op; each result is a new tensor, unless ALIAS names an argument
//                          index: then it is a view sharing that argument's storage (no bytes);
//      MUTATE              an op that writes the arguments at the MUTATE indices in place (a
//                          MUTATE field on a CALL line: an op with results that also writes them);
//      COPY DST SRC        a new name for SRC's storage (a reference, no bytes, no op);
//      COPY_FROM DST SRC   an op writing SRC into DST in place (no time recorded: 0);
//      RELEASE NAME        drops a name; a storage lives until its last name or view is released
//                          (or its last use, if later); what is never released lives to the end;
//      ANNOTATE BACKWARD   ops after it are backward ops (never recomputed);
//      SAVED NAME          (vtensor's, from vtensor.torch) NAME's storage is one the recording
//                          runtime can move (autograd saved it); where a log has SAVED lines every
//                          other tensor is pinned (TensorInfo::pinned), and a storage written in
//                          place after its op made it, or made by an op that writes its inputs, is
//                          not recomputable (its values are followed).
//    Sizes are rounded up to whole floats. A forward result whose producer's inputs are written
//    in place (MUTATE, COPY_FROM, through any name or view) before its last access is not
//    recomputable (mark_overwritten_inputs).
// Malformed input throws std::invalid_argument naming the file and the line; nothing is built.
#pragma once
#include <istream>
#include <string>
#include <vector>

#include "vtensor/core/graph.h"
#include "vtensor/memory/access_tracker.h"

namespace vtensor {

Graph load_vtensor_trace(const std::string& path);
Graph load_dtr_log(const std::string& path);
// The same from a stream; `name` stands for the file in the messages (the fuzz targets feed these).
Graph read_vtensor_trace(std::istream& in, const std::string& name);
Graph read_dtr_log(std::istream& in, const std::string& name);
// Clears TensorInfo::recomputable on each forward result t whose producer reads a storage that
// an op after t's production and before t's horizon writes in place: re-running the producer
// would read other values. t's horizon is its last access (last use or release), extended to
// the horizons of the recomputable tensors made from it (their recomputation may recompute t).
// Writes at or after the horizon are harmless. Returns how many tensors it marked.
int mark_overwritten_inputs(Graph& g);
// A path to either format (told apart by the first line), or "dtr:NAME" for one of the DTR logs.
Graph load_trace(const std::string& spec);

// The extracted DTR logs (the build extracts ../shared/external/dtr-logs/logs.zip; the
// environment variable VTENSOR_DTR_LOGS overrides). Empty when absent.
std::string dtr_logs_dir();
// Short names: densenet121, inceptionv4, lstm, resnet32, transformer, treelstm, unet, unroll_gan.
std::vector<std::string> dtr_log_names();
std::string dtr_log_path(const std::string& name);  // throws std::invalid_argument naming the accepted names

// Sum of the recorded op times of a replayed graph.
double recorded_total_ms(const Graph& g);
// The access trace the graph's recorded op times imply, ops laid end to end: at each op's start
// a read of every input, then a write of every output and in-place input (views as their base).
// For planners run on a log without executing it (bench/dtr_log_plan.cpp). op_ms is filled;
// swap_ns_per_byte is left 0 (a log holds no copies).
AccessTrace recorded_access_trace(const Graph& g);

}  // namespace vtensor
