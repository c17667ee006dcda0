// A DTR log as Capuchin's planner sees it, read by trace_io (the reader replay uses): storages
// (COPY is a second name, ALIAS a view), lineage, op times and the access trace the recorded
// times imply (recorded_access_trace).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
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
  EXPECT_TRUE(y.recomputable) << "a forward op (its later in-place write is the documented deviation)";
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
