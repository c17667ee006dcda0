// parse_bytes: the one byte-size syntax of the CLI (--budget, --host-budget, ...) and the Python
// package (vtensor.torch's budgets).
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "vtensor/core/errors.h"

using vtensor::parse_bytes;

TEST(ParseBytes, BinaryAndDecimalUnitsIntsFloatsExponentsAndASpace) {
  EXPECT_EQ(parse_bytes("4096"), 4096u);
  EXPECT_EQ(parse_bytes("512MiB"), 512u << 20);
  EXPECT_EQ(parse_bytes("64 MiB"), 64u << 20);
  EXPECT_EQ(parse_bytes(" 2G "), size_t{2} << 30);
  EXPECT_EQ(parse_bytes("1.5GiB"), size_t{3} << 29);
  EXPECT_EQ(parse_bytes("64KB"), 64000u);
  EXPECT_EQ(parse_bytes("64MB"), 64000000u);
  EXPECT_EQ(parse_bytes("1e8"), 100000000u);
  EXPECT_EQ(parse_bytes("2.5E3 B"), 2500u);
  EXPECT_EQ(parse_bytes("1e+2KiB"), 102400u);
}

TEST(ParseBytes, BadTextNamesWhatWasWrongAndWhatIsAccepted) {
  for (const std::string bad : {"", "abc", "MiB", "-5", "12XB", "1e", "inf", "nan", "0x10", "1 2", "1..5"}) {
    try {
      parse_bytes(bad, "--budget");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("--budget"), std::string::npos) << m;
      EXPECT_NE(m.find("accepted"), std::string::npos) << m;
    }
  }
  for (const std::string far : {"0", "0.1", "1e400", "1e30", "2000000GB"}) {
    try {
      parse_bytes(far, "budget");
      ADD_FAILURE() << "accepted '" << far << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("out of range (1 B to 1 PB)"), std::string::npos) << e.what();
    }
  }
}
