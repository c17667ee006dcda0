// The command's outputs (vtensor/core/output.h): checked before the run, never written over one
// another or an input, a symlink kept, a device written in place, and a run interrupted by
// SIGINT / SIGTERM exits 130 / 143 leaving every existing output as it was and no temporary file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/cli.h"

namespace fs = std::filesystem;
using vtensor::test::run_cli;
using vtensor::test::temp_path;

namespace {

fs::path fresh_dir(const std::string& tag) {
  const fs::path d = temp_path("outputs", tag);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST(Outputs, OneFileForTwoOutputsOrAnOutputOverAnInputIsRefusedBeforeTheRun) {
  const fs::path d = fresh_dir("distinct");
  const std::string x = (d / "x.json").string();
  auto r = run_cli("train --model mlp-tiny --iters 2 --quiet --report " + x + " --html " + x);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--html '" + x + "' is the same file as --report"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("done:"), std::string::npos) << "the run started: " << r.output;
  EXPECT_FALSE(fs::exists(x));
  ASSERT_EQ(run_cli("train --model mlp-tiny --iters 2 --quiet --timeline --report " + x).code, 0);
  const std::string before = read(x);
  r = run_cli("view " + x + " -o " + x);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("is the same file as the input"), std::string::npos) << r.output;
  EXPECT_EQ(read(x), before);
  r = run_cli("train --model mlp-tiny --iters 2 --quiet --report " + d.string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("is a folder"), std::string::npos) << r.output;
  fs::remove_all(d);
}

TEST(Outputs, ASymlinkStaysAndADeviceIsWrittenInPlace) {
  const fs::path d = fresh_dir("link");
  std::ofstream(d / "real.json") << "old";
  fs::create_symlink("real.json", d / "link.json");
  auto r = run_cli("train --model mlp-tiny --iters 2 --quiet --report " + (d / "link.json").string());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::is_symlink(d / "link.json"));
  EXPECT_EQ(read(d / "real.json").rfind("{", 0), 0u);
  r = run_cli("train --model mlp-tiny --iters 2 --quiet --report /dev/null");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  r = run_cli("train --model mlp-tiny --iters 2 --quiet --report /dev/full");  // a full disk
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("error writing report '/dev/full'"), std::string::npos) << r.output;
  fs::remove_all(d);
}

TEST(Outputs, AnInterruptedRunExitsByItsSignalAndLeavesTheOutputsAsTheyWere) {
  const fs::path d = fresh_dir("signal");
  std::ofstream(d / "r.json") << "old";
  for (const auto& [sig, code] : {std::pair<std::string, int>{"INT", 130}, {"TERM", 143}}) {
    SCOPED_TRACE(sig);
    // A run far longer than the second it is given: the signal always lands in it.
    const std::string cmd = "bash -c '" + std::string(VTENSOR_BINARY) + " train --model resnet-tiny --iters 1000000 --quiet --report " +
                            (d / "r.json").string() + " >/dev/null 2>&1 & p=$!; sleep 1; kill -" + sig +
                            " $p; wait $p; echo rc=$?'";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[256];
    while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    pclose(p);
    EXPECT_NE(out.find("rc=" + std::to_string(code)), std::string::npos) << out;
    EXPECT_EQ(read(d / "r.json"), "old");
    size_t n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(d)) ++n;
    EXPECT_EQ(n, 1u) << "a temporary file was left";
  }
  fs::remove_all(d);
}

// A run whose second output fails to write leaves the first as it was too: its outputs are renamed
// together at its end, or none of them.
TEST(Outputs, AFailedRunLeavesEveryExistingOutputByteForByte) {
  const fs::path d = fresh_dir("together");
  std::ofstream(d / "r.json") << "old report";
  std::ofstream(d / "p.html") << "old page";
  const std::string cmd = "env VTENSOR_FAULT=report-write:2 " + std::string(VTENSOR_BINARY) +
                          " train --model mlp-tiny --iters 2 --quiet --report " + (d / "r.json").string() + " --html " +
                          (d / "p.html").string() + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = pclose(p);
  EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 1) << out;
  EXPECT_NE(out.find("injected fault: page write"), std::string::npos) << out;
  EXPECT_EQ(read(d / "r.json"), "old report");  // written whole to its temporary file, never renamed
  EXPECT_EQ(read(d / "p.html"), "old page");
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(d)) ++n;
  EXPECT_EQ(n, 2u) << "a temporary file was left";
  fs::remove_all(d);
}

// Two runs writing one path at once: the survivor is one whole report, not a mix.
TEST(Outputs, TwoConcurrentWritersLeaveOneCompleteFile) {
  const fs::path d = fresh_dir("concurrent");
  const std::string r = (d / "r.json").string();
  const std::string one = std::string(VTENSOR_BINARY) + " train --model mlp-tiny --iters 3 --quiet --report " + r;
  const std::string cmd = "bash -c '" + one + " >/dev/null & " + one + " --seed 7 >/dev/null; wait; echo rc=$?'";
  for (int k = 0; k < 3; ++k) {
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[256];
    while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    pclose(p);
    EXPECT_NE(out.find("rc=0"), std::string::npos) << out;
    const std::string text = read(r);
    EXPECT_NO_THROW((void)nlohmann::json::parse(text)) << text.substr(0, 200);
    size_t n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(d)) ++n;
    EXPECT_EQ(n, 1u) << "a temporary file was left";
  }
  fs::remove_all(d);
}

// SIGINT wherever it lands (during the run, while the outputs are written, after): either the run
// finished and its outputs are whole, or it exited 130 and they are as they were; never a mix.
TEST(Outputs, SigintAtAnyPointLeavesNothingHalfWritten) {
  const fs::path d = fresh_dir("sigint");
  for (const char* delay : {"0.05", "0.2", "0.4", "0.8", "1.5"}) {
    SCOPED_TRACE(delay);
    std::ofstream(d / "r.json") << "old";
    std::ofstream(d / "p.html") << "old";
    const std::string cmd = "bash -c '" + std::string(VTENSOR_BINARY) +
                            " train --model resnet-tiny --iters 30 --quiet --timeline --report " + (d / "r.json").string() +
                            " --html " + (d / "p.html").string() + " >/dev/null 2>&1 & p=$!; sleep " + delay +
                            "; kill -INT $p 2>/dev/null; wait $p; echo rc=$?'";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[256];
    while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    pclose(p);
    const bool finished = out.find("rc=0") != std::string::npos;
    EXPECT_TRUE(finished || out.find("rc=130") != std::string::npos) << out;
    const std::string report = read(d / "r.json"), page = read(d / "p.html");
    if (finished) {
      EXPECT_NO_THROW((void)nlohmann::json::parse(report));
      EXPECT_NE(page, "old");
    } else {
      EXPECT_EQ(report, "old");
      EXPECT_EQ(page, "old");
    }
    size_t n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(d)) ++n;
    EXPECT_EQ(n, 2u) << "a temporary file was left";
  }
  fs::remove_all(d);
}
