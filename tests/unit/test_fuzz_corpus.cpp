// Every fuzz target (tests/fuzz/targets.h) on every file of its directory under tests/fuzz: the
// seeds, and each input a fuzzing run once found failing (kept there as a regression test, named
// after what it found). A target fails the test by throwing anything but std::invalid_argument;
// under the sanitizer build (scripts/sanitize.sh) a memory error fails it too.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/fuzz/targets.h"
#include "vtensor/core/graph.h"
#include "vtensor/policy/auto/auto.h"

namespace fs = std::filesystem;

TEST(FuzzCorpus, EveryTargetAcceptsOrRejectsEverySeedAndPastFinding) {
  size_t inputs = 0;
  for (const auto& t : vtensor::fuzz::targets()) {
    const fs::path dir = fs::path(VTENSOR_SOURCE_DIR) / "tests" / "fuzz" / t.name;
    ASSERT_TRUE(fs::is_directory(dir)) << dir;
    size_t here = 0;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (!e.is_regular_file()) continue;
      std::ifstream in(e.path(), std::ios::binary);
      const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
      SCOPED_TRACE(e.path().string());
      EXPECT_NO_THROW(t.run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
      ++here;
    }
    EXPECT_GT(here, 0u) << "no seeds in " << dir;
    inputs += here;
  }
  RecordProperty("inputs", static_cast<int>(inputs));
}

// The plan target's seeds are plans for its graph: a change to the models (an op renamed) changes
// the fingerprint, and seeds left with the old one would all stop at it.
TEST(FuzzCorpus, ThePlanSeedsAreForThePlanTargetsGraph) {
  for (const char* seed : {"resnet-tiny-1MiB.json", "three-pins.json"}) {
    SCOPED_TRACE(seed);
    std::ifstream in(fs::path(VTENSOR_SOURCE_DIR) / "tests" / "fuzz" / "plan" / seed);
    ASSERT_TRUE(in.good());
    const auto j = nlohmann::json::parse(in);
    vtensor::AutoPolicy policy;
    EXPECT_NO_THROW(policy.load_plan(j, vtensor::fuzz::plan_graph(), vtensor::fuzz::kPlanBudget, seed));
  }
}
