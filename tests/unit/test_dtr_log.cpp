// A DTR log as Capuchin's planner sees it, read by trace_io (the reader replay uses): storages
// (COPY is a second name, ALIAS a view), lineage, op times and the access trace the recorded
// times imply (recorded_access_trace).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>

#include <unistd.h>

#include "vtensor/memory/trace_io.h"
#include "vtensor/policy/capuchin.h"

using namespace vtensor;

namespace {

// One file per test: ctest runs the tests of this file as parallel processes.
std::string write_log(const std::string& text) {
  const std::string path = ::testing::TempDir() + "dtr_log_" +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
                           std::to_string(getpid()) + ".log";
  std::ofstream(path) << text;
  return path;
}

TEST(DtrLog, StoragesLineageTimesAndTheAccessTrace) {
  const std::string path = write_log(R"({"ANNOTATION":"START","INSTRUCTION":"ANNOTATE"}
{"INSTRUCTION":"CONSTANT","NAME":"w0"}
{"INSTRUCTION":"MEMORY","MEMORY":"64","NAME":"w0"}
{"DST":"w","INSTRUCTION":"COPY","SRC":"w0"}
{"INSTRUCTION":"RELEASE","NAME":"w0"}
{"ARGS":["w"],"INSTRUCTION":"CALL","NAME":"mm","RESULT":["y"],"TIME":"100"}
{"INSTRUCTION":"MEMORY","MEMORY":"256","NAME":"y"}
{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"y"}
{"ARGS":["y"],"INSTRUCTION":"CALL","NAME":"view","RESULT":["v"],"TIME":"5"}
{"INSTRUCTION":"MEMORY","MEMORY":"256","NAME":"v"}
{"ALIAS":"0","INSTRUCTION":"ALIAS","NAME":"v"}
{"ANNOTATION":"BACKWARD","INSTRUCTION":"ANNOTATE"}
{"ARGS":["v","w"],"INSTRUCTION":"MUTATE","MUTATE":[0],"NAME":"add_","TIME":"20"}
{"ARGS":["w"],"INSTRUCTION":"CALL","NAME":"relu","RESULT":["z"],"TIME":"7"}
{"INSTRUCTION":"MEMORY","MEMORY":"128","NAME":"z"}
{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"z"}
{"INSTRUCTION":"RELEASE","NAME":"y"}
)");
  const Graph g = load_dtr_log(path);
  ASSERT_EQ(g.num_ops(), 4u);
  EXPECT_EQ(g.op(2).name, "add_");
  ASSERT_EQ(g.num_tensors(), 3u);  // w, y, z: the view v is y's storage under another name
  const AccessTrace t = recorded_access_trace(g);
  ASSERT_EQ(t.op_ms.size(), 4u);
  EXPECT_DOUBLE_EQ(t.op_ms[0], 100e-6);
  EXPECT_DOUBLE_EQ(t.op_ms[3], 7e-6);

  const PlannerInput in = planner_input(g, t, 1000);
  ASSERT_EQ(in.tensors.size(), 3u);
  const PlannerTensor &w = in.tensors[0], &y = in.tensors[1], &z = in.tensors[2];
  EXPECT_TRUE(w.persistent);
  EXPECT_EQ(w.bytes, 64u);
  EXPECT_EQ(y.bytes, 256u);
  EXPECT_EQ(y.producer, 0);
  EXPECT_EQ(y.inputs, (std::vector<TensorId>{0}));
  EXPECT_TRUE(y.recomputable) << "a forward op; the in-place write is to y itself, not to an input of its producer";
  EXPECT_EQ(z.producer, 3);
  EXPECT_FALSE(z.recomputable) << "after ANNOTATE BACKWARD";
  // The MUTATE (through the view) reads y and w and writes y, all at op 2's start (105 ns).
  std::vector<std::tuple<TensorId, int, AccessKind, int64_t>> at2;
  for (const auto& a : in.accesses)
    if (a.op_index == 2) at2.emplace_back(a.id, a.op_index, a.kind, a.time_ns);
  const std::vector<std::tuple<TensorId, int, AccessKind, int64_t>> want = {
      {1, 2, AccessKind::kRead, 105}, {0, 2, AccessKind::kRead, 105}, {1, 2, AccessKind::kWrite, 105}};
  EXPECT_EQ(at2, want);
  std::remove(path.c_str());
}

// In-place writes to what a producer reads: t = g(a, w), where a = f(w) also goes by the view
// name v and the COPY name c; t's last use is z = h(t), then `at_last` (an op that may read t),
// then the release of t and z, then `after`. The write goes in at one of the three places.
std::string mutation_log(const std::string& before_last_use, const std::string& at_last, const std::string& after) {
  return R"({"ANNOTATION":"START","INSTRUCTION":"ANNOTATE"}
{"INSTRUCTION":"CONSTANT","NAME":"w"}
{"INSTRUCTION":"MEMORY","MEMORY":"64","NAME":"w"}
{"INSTRUCTION":"CONSTANT","NAME":"u"}
{"INSTRUCTION":"MEMORY","MEMORY":"64","NAME":"u"}
{"ARGS":["w"],"INSTRUCTION":"CALL","NAME":"f","RESULT":["a"],"TIME":"10"}
{"INSTRUCTION":"MEMORY","MEMORY":"256","NAME":"a"}
{"ARGS":["a"],"INSTRUCTION":"CALL","NAME":"view","RESULT":["v"],"TIME":"1"}
{"INSTRUCTION":"MEMORY","MEMORY":"256","NAME":"v"}
{"ALIAS":"0","INSTRUCTION":"ALIAS","NAME":"v"}
{"DST":"c","INSTRUCTION":"COPY","SRC":"v"}
{"ARGS":["a","w"],"INSTRUCTION":"CALL","NAME":"g","RESULT":["t"],"TIME":"10"}
{"INSTRUCTION":"MEMORY","MEMORY":"256","NAME":"t"}
)" + before_last_use +
         R"({"ARGS":["t"],"INSTRUCTION":"CALL","NAME":"h","RESULT":["z"],"TIME":"10"}
{"INSTRUCTION":"MEMORY","MEMORY":"256","NAME":"z"}
)" + at_last + R"({"INSTRUCTION":"RELEASE","NAME":"t"}
{"INSTRUCTION":"RELEASE","NAME":"z"}
)" + after;
}

const TensorInfo& named(const Graph& g, const std::string& name) {
  for (const auto& t : g.tensors())
    if (t.name == name) return t;
  throw std::out_of_range(name);
}

TEST(DtrLog, AnInputWrittenInPlaceBeforeTheLastAccessBlocksRecomputation) {
  const std::string add_a = R"({"ARGS":["a","u"],"INSTRUCTION":"MUTATE","MUTATE":[0],"NAME":"add_","TIME":"5"}
)";
  struct Case {
    const char* what;
    std::string before, at_last, after;
    bool t_recomputable;
    bool a_recomputable = true;  // f reads w; a is never released, so a write to w counts against it
  };
  const std::vector<Case> cases = {
      {"no write", "", "", "", true},
      {"MUTATE of a between t's production and last use", add_a, "", "", false},
      {"MUTATE of a after t's release", "", "", add_a, true},
      {"MUTATE of a at t's last access, which reads t (a recompute runs before it)", "",
       R"({"ARGS":["a","t"],"INSTRUCTION":"MUTATE","MUTATE":[0],"NAME":"add_","TIME":"5"}
)", "", true},
      {"MUTATE through the view name v", R"({"ARGS":["v"],"INSTRUCTION":"MUTATE","MUTATE":[0],"NAME":"relu_","TIME":"5"}
)", "", "", false},
      {"MUTATE through the COPY name c", R"({"ARGS":["u","c"],"INSTRUCTION":"MUTATE","MUTATE":[1],"NAME":"mul_","TIME":"5"}
)", "", "", false},
      {"COPY_FROM into the COPY name c", R"({"DST":"c","INSTRUCTION":"COPY_FROM","SRC":"u"}
)", "", "", false},
      {"a MUTATE that only reads a", R"({"ARGS":["u","a"],"INSTRUCTION":"MUTATE","MUTATE":[0],"NAME":"add_","TIME":"5"}
)", "", "", true},
      {"MUTATE of the constant w", R"({"ARGS":["w"],"INSTRUCTION":"MUTATE","MUTATE":[0],"NAME":"zero_","TIME":"5"}
)", "", "", false, false},
      // The log's last op: a lives to the end, so its horizon is this op, and a write there is harmless.
      {"MUTATE of w after t's release, as the last op", "", "", R"({"ARGS":["w"],"INSTRUCTION":"MUTATE","MUTATE":[0],"NAME":"zero_","TIME":"5"}
)", true, true},
      {"MUTATE of w after t's release, before a's end", "", "", R"({"ARGS":["w"],"INSTRUCTION":"MUTATE","MUTATE":[0],"NAME":"zero_","TIME":"5"}
{"ARGS":["u"],"INSTRUCTION":"CALL","NAME":"k","RESULT":["y"],"TIME":"10"}
{"INSTRUCTION":"MEMORY","MEMORY":"256","NAME":"y"}
)", true, false},
      // A chain: y = k(z) lives to the end; recomputing it after the write would recompute z and
      // then t from the new a, so t is not recomputable though the write follows t's release.
      {"MUTATE of a after t's release, before the end of y = k(h(t))", "",
       R"({"ARGS":["z"],"INSTRUCTION":"CALL","NAME":"k","RESULT":["y"],"TIME":"10"}
{"INSTRUCTION":"MEMORY","MEMORY":"256","NAME":"y"}
)", add_a + R"({"ARGS":["u"],"INSTRUCTION":"CALL","NAME":"k","RESULT":["q"],"TIME":"10"}
{"INSTRUCTION":"MEMORY","MEMORY":"256","NAME":"q"}
)", false},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string path = write_log(mutation_log(c.before, c.at_last, c.after));
    Graph g = load_dtr_log(path);
    EXPECT_EQ(named(g, "t").recomputable, c.t_recomputable);
    EXPECT_EQ(named(g, "a").recomputable, c.a_recomputable);
    EXPECT_TRUE(named(g, "z").recomputable);
    // The planner sees the same.
    const PlannerInput in = planner_input(g, recorded_access_trace(g), 1000);
    EXPECT_EQ(in.tensors[static_cast<size_t>(named(g, "t").id)].recomputable, c.t_recomputable);
    // Marking again finds the same tensors (and leaves them marked).
    EXPECT_EQ(mark_overwritten_inputs(g), int{!c.t_recomputable} + int{!c.a_recomputable});
    std::remove(path.c_str());
  }
}

TEST(DtrLog, UnknownTensorNamesTheLine) {
  const std::string path = write_log(R"({"ARGS":["nope"],"INSTRUCTION":"CALL","NAME":"relu","RESULT":["z"],"TIME":"7"}
)");
  try {
    load_dtr_log(path);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("line 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("nope"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
  EXPECT_THROW(load_dtr_log("/nonexistent/dtr.log"), std::invalid_argument);
}

}  // namespace

// Found by feeding the fuzz targets sizes near int64's limit (tests/fuzz/trace/found-*,
// tests/fuzz/dtr_log/found-*): rounding a size up to whole floats, or multiplying out a shape,
// overflowed int64 (undefined behaviour; UBSan stops there). Sizes are now bounded at 1 PiB, and
// what is above is bad input naming the line.
TEST(TraceLimits, SizesNearInt64sLimitAreBadInputNotOverflow) {
  const auto rejects = [](auto read, const std::string& text, const std::string& what) {
    std::istringstream in(text);
    try {
      read(in, "t");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  const auto trace = [](std::istream& in, const std::string& n) { return read_vtensor_trace(in, n); };
  const auto dtr = [](std::istream& in, const std::string& n) { return read_dtr_log(in, n); };
  const std::string head = R"({"type":"graph","ops":[],"op_times":[{"ms":[]}],"tensors":[{"id":0,"name":"x","kind":"data","producer":-1,)";
  rejects(trace, head + R"("bytes":9223372036854775807}]})", "bytes must be 0 to 1 PiB");
  rejects(trace, head + R"("bytes":16,"shape":[4611686018427387904,8]}]})", "'shape' must hold sizes");
  rejects(trace, head + R"("bytes":16,"shape":[-4,-1]}]})", "'shape' must hold sizes");
  // Past uint64 a number parses as a double, whose conversion to an integer overflowed (found by
  // fuzz_trace in CI: tests/fuzz/trace/found-shape-past-uint64.jsonl); so are fractions.
  rejects(trace, head + R"("bytes":16,"shape":[46116860184272387904,8]}]})", "'shape' must be an array of integers");
  rejects(trace, head + R"("bytes":16,"shape":[2.5,8]}]})", "'shape' must be an array of integers");
  rejects(trace, head + R"("bytes":16,"shape":[9223372036854775808,8]}]})", "'shape' must be an array of integers");
  rejects(trace, head + R"("bytes":18446744073709551615}]})", "field 'bytes' must be an integer");
  rejects(dtr,
          "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"a\"}\n"
          "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"9223372036854775807\",\"NAME\":\"a\"}\n",
          "over 1 PiB");
  // At the bound itself both still read.
  std::istringstream ok(head + R"("bytes":1125899906842624}]})");
  EXPECT_EQ(read_vtensor_trace(ok, "t").tensor(0).bytes(), size_t{1} << 50);
}

namespace {

// vtensor.torch's SAVED lines: only the storages autograd saved may move; every other is pinned,
// and neither the memory manager's eviction nor the planners' candidates touch it.
TEST(DtrLog, SavedLinesPinEveryOtherStorage) {
  const std::string path = write_log(R"({"ANNOTATION":"START","INSTRUCTION":"ANNOTATE"}
{"INSTRUCTION":"CONSTANT","NAME":"w"}
{"INSTRUCTION":"MEMORY","MEMORY":"64","NAME":"w"}
{"ARGS":["w"],"INSTRUCTION":"CALL","NAME":"mm","RESULT":["y"],"TIME":"100"}
{"INSTRUCTION":"MEMORY","MEMORY":"256","NAME":"y"}
{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"y"}
{"ARGS":["y"],"INSTRUCTION":"CALL","NAME":"view","RESULT":["v"],"TIME":"5"}
{"INSTRUCTION":"MEMORY","MEMORY":"256","NAME":"v"}
{"ALIAS":"0","INSTRUCTION":"ALIAS","NAME":"v"}
{"INSTRUCTION":"SAVED","NAME":"v"}
{"ARGS":["w"],"INSTRUCTION":"CALL","NAME":"relu","RESULT":["z"],"TIME":"7"}
{"INSTRUCTION":"MEMORY","MEMORY":"128","NAME":"z"}
{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"z"}
{"ARGS":["z"],"INSTRUCTION":"MUTATE","MUTATE":[0],"NAME":"div_","TIME":"3"}
{"INSTRUCTION":"SAVED","NAME":"z"}
{"ARGS":["y"],"INSTRUCTION":"CALL","NAME":"tanh","RESULT":["u"],"TIME":"7"}
{"INSTRUCTION":"MEMORY","MEMORY":"128","NAME":"u"}
{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"u"}
{"ANNOTATION":"BACKWARD","INSTRUCTION":"ANNOTATE"}
{"ARGS":["v","z","u"],"INSTRUCTION":"CALL","NAME":"mm_backward","RESULT":["g"],"TIME":"20"}
{"INSTRUCTION":"MEMORY","MEMORY":"64","NAME":"g"}
{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"g"}
)");
  const Graph g = load_dtr_log(path);
  ASSERT_EQ(g.num_tensors(), 5u);  // w, y (v is its view), z, u, g
  EXPECT_TRUE(g.tensor(0).pinned);
  EXPECT_FALSE(g.tensor(1).pinned) << "saved through its view";
  EXPECT_FALSE(g.tensor(2).pinned);
  EXPECT_TRUE(g.tensor(3).pinned);
  EXPECT_TRUE(g.tensor(4).pinned);
  EXPECT_TRUE(g.tensor(1).recomputable);
  EXPECT_FALSE(g.tensor(2).recomputable) << "div_ wrote it after relu made it";
  const PlannerInput in = planner_input(g, recorded_access_trace(g), 1000);
  EXPECT_FALSE(in.tensors[1].pinned);
  EXPECT_TRUE(in.tensors[3].pinned);
  // A log without SAVED lines pins nothing (DTR's own logs).
  std::ofstream(path) << R"({"INSTRUCTION":"CONSTANT","NAME":"w"}
{"INSTRUCTION":"MEMORY","MEMORY":"64","NAME":"w"}
{"ARGS":["w"],"INSTRUCTION":"CALL","NAME":"relu","RESULT":["z"],"TIME":"7"}
{"INSTRUCTION":"MEMORY","MEMORY":"128","NAME":"z"}
{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"z"}
{"ARGS":["z"],"INSTRUCTION":"MUTATE","MUTATE":[0],"NAME":"div_","TIME":"3"}
)";
  const Graph plain = load_dtr_log(path);  // nor changes what is recomputable
  for (const auto& t : plain.tensors()) EXPECT_FALSE(t.pinned) << t.name;
  EXPECT_TRUE(plain.tensor(1).recomputable);
  std::remove(path.c_str());
}

}  // namespace

namespace {

// A CALL's MUTATE field: an op with results that also writes arguments (batch norm's running
// statistics). The writes are the op's; in a log to follow with values its results are not
// recomputable, since re-running the op would write again.
TEST(DtrLog, ACallsMutateFieldWritesItsArguments) {
  const std::string text = R"({"INSTRUCTION":"CONSTANT","NAME":"stats"}
{"INSTRUCTION":"MEMORY","MEMORY":"64","NAME":"stats"}
{"INSTRUCTION":"CONSTANT","NAME":"x"}
{"INSTRUCTION":"MEMORY","MEMORY":"256","NAME":"x"}
{"ARGS":["x","stats"],"INSTRUCTION":"CALL","MUTATE":[1],"NAME":"native_batch_norm","RESULT":["y"],"TIME":"9"}
{"INSTRUCTION":"MEMORY","MEMORY":"256","NAME":"y"}
{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"y"}
)";
  const std::string path = write_log(text + R"({"INSTRUCTION":"SAVED","NAME":"y"}
)");
  const Graph g = load_dtr_log(path);
  ASSERT_EQ(g.num_ops(), 1u);
  EXPECT_EQ(g.op(0).inplace, (std::vector<TensorId>{0}));
  EXPECT_FALSE(g.tensor(2).recomputable);
  std::ofstream(path) << text;  // DTR's own logs: recomputable as before
  EXPECT_TRUE(load_dtr_log(path).tensor(2).recomputable);
  std::ofstream(path) << R"({"INSTRUCTION":"CONSTANT","NAME":"x"}
{"INSTRUCTION":"MEMORY","MEMORY":"256","NAME":"x"}
{"ARGS":["x"],"INSTRUCTION":"CALL","MUTATE":[3],"NAME":"bad","RESULT":["y"],"TIME":"9"}
)";
  try {
    load_dtr_log(path);
    ADD_FAILURE() << "an index past the arguments was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("MUTATE index 3 is not an argument index"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

}  // namespace
