// read_dtr_log on a small hand-written log: storages (COPY is a second name, ALIAS a view),
// lineage, mutation, op times and the access trace.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <tuple>

#include "vtensor/memory/dtr_log.h"

using namespace vtensor;

namespace {

std::string write_log(const std::string& text) {
  const std::string path = ::testing::TempDir() + "dtr_log_test.log";
  std::ofstream(path) << text;
  return path;
}

TEST(DtrLog, StoragesLineageMutationAndTimes) {
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
  const LoggedProgram p = read_dtr_log(path);
  ASSERT_EQ(p.op_names.size(), 4u);
  EXPECT_EQ(p.op_names[2], "add_");
  EXPECT_EQ(p.op_time_ns, (std::vector<int64_t>{100, 5, 20, 7}));
  EXPECT_EQ(p.total_time_ns, 132);
  EXPECT_EQ(p.backward_start_op, 2);
  ASSERT_EQ(p.tensors.size(), 4u);  // w, y, the view (no bytes), z
  const LoggedTensor &w = p.tensors[0], &y = p.tensors[1], &v = p.tensors[2], &z = p.tensors[3];
  EXPECT_TRUE(w.persistent);
  EXPECT_EQ(w.bytes, 64u);
  EXPECT_EQ(y.bytes, 256u);
  EXPECT_EQ(y.producer, 0);
  EXPECT_EQ(y.inputs, (std::vector<TensorId>{0}));
  EXPECT_FALSE(y.recomputable) << "mutated in place through its view";
  EXPECT_EQ(v.bytes, 0u);
  EXPECT_TRUE(z.recomputable);
  EXPECT_EQ(z.producer, 3);
  // The MUTATE reads the view's storage (y) and w, and writes y; all at op 2's start (105 ns).
  std::vector<std::tuple<TensorId, int, AccessKind, int64_t>> at2;
  for (const auto& a : p.trace.accesses)
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
    read_dtr_log(path);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("line 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("nope"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
  EXPECT_THROW(read_dtr_log("/nonexistent/dtr.log"), std::invalid_argument);
}

}  // namespace
