// The one output path every writer takes (vtensor/core/output.h): a target is replaced whole or
// not at all, a symlink stays a symlink, a device is written in place, and nothing is left behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "vtensor/core/errors.h"
#include "vtensor/core/fault.h"
#include "vtensor/core/output.h"

namespace fs = std::filesystem;
using namespace vtensor;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("vtensor-output-" + name + "-" + std::to_string(::getpid()));
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

size_t entries(const fs::path& d) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(d)) ++n;
  return n;
}

}  // namespace

TEST(Output, ReplacesTheTargetWholeAndLeavesNoTemporaryFile) {
  const fs::path d = fresh_dir("whole");
  const fs::path f = d / "r.json";
  std::ofstream(d / "r.json.tmp") << "the user's own";
  write_output(f.string(), "report", std::string("first\n"));
  write_output(f.string(), "report", std::string("second\n"));
  EXPECT_EQ(read(f), "second\n");
  EXPECT_EQ(read(d / "r.json.tmp"), "the user's own");  // never used as the temporary name
  EXPECT_EQ(entries(d), 2u);
  fs::remove_all(d);
}

TEST(Output, ASymlinkStaysALinkAndItsTargetIsWritten) {
  const fs::path d = fresh_dir("link");
  std::ofstream(d / "real.json") << "old";
  fs::create_symlink("real.json", d / "link.json");
  write_output((d / "link.json").string(), "report", std::string("new"));
  EXPECT_TRUE(fs::is_symlink(d / "link.json"));
  EXPECT_EQ(read(d / "real.json"), "new");
  EXPECT_EQ(check_output((d / "link.json").string(), "--report"), fs::weakly_canonical(d / "real.json").string());
  fs::remove_all(d);
}

TEST(Output, ACharacterDeviceIsWrittenInPlaceAndAFolderIsRefused) {
  write_output("/dev/null", "report", std::string("nothing"));
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  EXPECT_THROW(write_output("/dev/full", "report", std::string("x")), IoError);  // a full device: an error, not exit 0
  EXPECT_TRUE(fs::is_character_file("/dev/full"));
  const fs::path d = fresh_dir("folder");
  EXPECT_THROW(check_output(d.string(), "--report"), std::invalid_argument);
  EXPECT_THROW(write_output(d.string(), "report", std::string("x")), std::invalid_argument);
  EXPECT_THROW(check_output((d / "no" / "r.json").string(), "--report"), std::invalid_argument);
  fs::remove_all(d);
}

TEST(Output, AFailedWriteLeavesTheTargetAsItWas) {
  const fs::path d = fresh_dir("failed");
  const fs::path f = d / "s.csv";
  std::ofstream(f) << "old";
  EXPECT_THROW(write_output(f.string(), "sweep", [](std::ostream& o) {
                 o << "half";
                 throw std::runtime_error("the run failed while writing");
               }),
               std::runtime_error);
  fault::arm(fault::Kind::kReportWrite, 1);
  EXPECT_THROW(write_output(f.string(), "sweep", std::string("new")), IoError);
  fault::disarm();
  EXPECT_EQ(read(f), "old");
  EXPECT_EQ(entries(d), 1u);
  fs::remove_all(d);
}

TEST(Output, TwoOutputsOrAnOutputAndAnInputThatAreOneFileAreRefused) {
  const fs::path d = fresh_dir("distinct");
  std::ofstream(d / "in.json") << "{}";
  fs::create_symlink("in.json", d / "alias.json");
  const std::string a = (d / "a.json").string(), in = (d / "in.json").string();
  EXPECT_NO_THROW(check_distinct({{"--report", a}, {"--html", (d / "b.html").string()}, {"--trace", ""}}, {in}));
  EXPECT_THROW(check_distinct({{"--report", a}, {"--html", a}}), std::invalid_argument);
  EXPECT_THROW(check_distinct({{"-o", in}}, {in}), std::invalid_argument);
  EXPECT_THROW(check_distinct({{"-o", (d / "alias.json").string()}}, {in}), std::invalid_argument);  // through the link
  EXPECT_THROW(check_distinct({{"--report", (d / "." / "a.json").string()}, {"--html", a}}), std::invalid_argument);
  EXPECT_NO_THROW(check_distinct({{"--report", "/dev/null"}, {"--html", "/dev/null"}}));  // a sink, twice
  fs::remove_all(d);
}
