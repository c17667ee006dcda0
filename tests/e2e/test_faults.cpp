// Fault injection (vtensor/core/fault.h): under each policy, for each kind of fault and every
// k over a tiny run, the run ends in the matching clean error, the memory manager's books still
// balance, and tearing the run down neither hangs nor crashes; the CLI turns each into exit 3
// (memory) or 1 (device, I/O) and leaves no report behind.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>

#include "tests/support/cli.h"
#include "vtensor/core/errors.h"
#include "vtensor/core/fault.h"
#include "vtensor/train/trainer.h"

using namespace vtensor;

namespace {

struct Disarm {
  ~Disarm() { fault::disarm(); }
};

TrainConfig tiny(const std::string& policy, size_t budget) {
  TrainConfig cfg;
  cfg.model.name = "mlp-tiny";
  cfg.policy = policy;
  cfg.budget = budget;
  cfg.iters = 3;
  return cfg;
}

size_t none_peak() {
  Trainer t(tiny("none", 0));
  size_t p = 0;
  for (const auto& s : t.run().iterations) p = std::max(p, s.peak_allocated);
  return p;
}

// Runs `cfg` with the nth event of `kind` failing; returns what it threw ("" if nothing).
// A run in which nothing failed returns "" and must have had fewer than nth events of the kind
// (on cpu, policies that plan from measured times may issue fewer copies from run to run).
std::string run_with_fault(const TrainConfig& cfg, fault::Kind kind, uint64_t nth) {
  fault::disarm();
  Trainer t(cfg);  // built before arming: its setup allocations are not the ones under test
  fault::arm(kind, nth);
  try {
    t.run();
    EXPECT_LT(fault::count(kind), nth) << fault::name(kind) << ": event #" << nth << " happened but did not fail";
    fault::disarm();
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("injected fault"), std::string::npos) << e.what();
    EXPECT_TRUE(kind == fault::Kind::kDeviceAlloc || kind == fault::Kind::kHostAlloc) << e.what();
    EXPECT_NO_THROW(t.memory().check_invariants()) << fault::name(kind) << " #" << nth;
    fault::disarm();
    return "oom";
  } catch (const DeviceError& e) {
    EXPECT_EQ(kind, fault::Kind::kCopy) << e.what();
    EXPECT_NO_THROW(t.memory().check_invariants()) << fault::name(kind) << " #" << nth;
    fault::disarm();
    return "device";
  }
  return "";
}

}  // namespace

TEST(Faults, EveryKOfEveryKindUnderEveryPolicyEndsCleanly) {
  Disarm disarm;
  const size_t half = none_peak() / 2;
  int cases = 0;
  for (const std::string policy : {"none", "lru", "lru-recompute", "capuchin", "dtr", "zero-overhead-swap",
                                   "compress+swap"}) {
    const TrainConfig cfg = tiny(policy, policy == "none" ? 0 : half);
    for (fault::Kind kind : {fault::Kind::kDeviceAlloc, fault::Kind::kHostAlloc, fault::Kind::kCopy}) {
      SCOPED_TRACE(policy + " " + fault::name(kind));
      fault::disarm();
      {
        Trainer t(cfg);
        fault::disarm();
        t.run();
      }
      const uint64_t n = fault::count(kind);
      if (policy != "none" && kind != fault::Kind::kDeviceAlloc) EXPECT_GT(n, 0u);  // the policy swaps
      int failed = 0;
      for (uint64_t k = 1; k <= n; ++k) {
        failed += run_with_fault(cfg, kind, k) != "";
        ++cases;
      }
      if (n > 0) EXPECT_GT(failed, 0);
      // Plans made from the cpu's wall clock vary; the others repeat exactly.
      if (policy != "capuchin" && policy != "zero-overhead-swap" && policy != "compress+swap")
        EXPECT_EQ(failed, static_cast<int>(n));
      EXPECT_EQ(run_with_fault(cfg, kind, 1000000), "");  // past the last: nothing fails
      std::printf("fault matrix: %-20s %-13s %4llu events, %4d failed cleanly\n", policy.c_str(), fault::name(kind),
                  static_cast<unsigned long long>(n), failed);
    }
  }
  EXPECT_GT(cases, 100);
}

TEST(Faults, TheCommandLineExitsThreeOrOneAndWritesNoReport) {
  const std::string report = vtensor::test::temp_path("faults", "r.json");
  struct Case {
    std::string fault, args, message;
    int code;
  };
  const Case cases[] = {
      {"device-alloc:5", "", "injected fault: device allocation", 3},
      {"host-alloc:1", "--policy lru --budget 24KiB", "injected fault: pinned host allocation", 3},
      {"copy:2", "--policy lru --budget 24KiB", "device error: injected fault: copy", 1},
      {"report-write:1", "", "injected fault: report write", 1},
      {"nonsense", "", "VTENSOR_FAULT='nonsense': accepted", 2},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.fault);
    const std::string cmd = "env VTENSOR_FAULT=" + c.fault + " " + std::string(VTENSOR_BINARY) +
                            " train --model mlp-tiny --iters 2 --quiet --report " + report + " " + c.args + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    const int status = pclose(p);
    EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, c.code) << out;
    EXPECT_NE(out.find(c.message), std::string::npos) << out;
    EXPECT_FALSE(std::filesystem::exists(report)) << out;
    EXPECT_FALSE(std::filesystem::exists(report + ".tmp")) << out;
  }
}

// A malformed VTENSOR_FAULT is refused before anything runs, whatever the command: it used to be
// read at the first fault point, which a run may never reach.
TEST(Faults, AMalformedSpecIsRefusedBeforeTheRun) {
  for (const std::string spec : {"copy:0", "copy:1x", "COPY:1", "device-alloc", "disk:3"}) {
    for (const std::string args : {"policies", "models", "costs --model mlp-tiny --gpu p100-16g"}) {
      SCOPED_TRACE(spec + " / " + args);
      const std::string cmd = "env VTENSOR_FAULT=" + spec + " " + std::string(VTENSOR_BINARY) + " " + args + " 2>&1";
      FILE* p = popen(cmd.c_str(), "r");
      std::string out;
      char buf[4096];
      while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
      const int status = pclose(p);
      EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 2) << out;
      EXPECT_NE(out.find("VTENSOR_FAULT='" + spec + "': accepted: KIND:K"), std::string::npos) << out;
    }
  }
}
