// A policy's own options (vtensor/policy/options.h): typed reads that refuse bad values naming the
// flag, and the registry refusing a flag the chosen policy does not declare.
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <stdexcept>
#include <string>

#include "vtensor/policy/options.h"
#include "vtensor/policy/registry.h"

using namespace vtensor;

namespace {
std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}
}  // namespace

TEST(PolicyOptions, TypedReadsTakeWhatIsGivenAndNameTheFlagOtherwise) {
  PolicyOptions o;
  o.set("n", 3).set("s", 1.5).set("c", "wall").set("l", "a,b").set("b", "2MiB");
  EXPECT_EQ(o.rehearsals("n", "none"), 3);
  EXPECT_EQ(o.positive("n"), 3);
  EXPECT_EQ(o.seconds("s", 0, 10), 1.5);
  EXPECT_EQ(o.choice("c", {"wall", "rehearsals"}), "wall");
  EXPECT_EQ(o.list("l"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(o.bytes("b"), size_t{2} << 20);
  EXPECT_FALSE(o.rehearsals("missing", "none"));
  EXPECT_TRUE(o.list("missing").empty());
  o.set("n", "-2").set("s", "11").set("c", "cpu").set("p", "0");
  EXPECT_EQ(refusal([&] { o.rehearsals("n", "no search"); }), "--n must be a rehearsal count >= 0 (0: no search), got -2");
  EXPECT_EQ(refusal([&] { o.seconds("s", 0, 10, true); }), "--s must be seconds in (0, 10], got 11");
  EXPECT_EQ(refusal([&] { o.choice("c", {"wall", "rehearsals"}); }), "--c must be wall or rehearsals, got 'cpu'");
  EXPECT_NE(refusal([&] { o.positive("p"); }).find("--p: must be a whole number above 0"), std::string::npos);
  o.set("n", "3x");
  EXPECT_NE(refusal([&] { o.rehearsals("n", "none"); }), "accepted");
}

TEST(PolicyOptions, AFlagThePolicyDoesNotDeclareIsRefusedNamingThoseThatDo) {
  PolicyOptions o;
  o.set("auto-search", 8);
  EXPECT_EQ(refusal([&] { make_policy("lru", o); }), "--auto-search applies to --policy auto only, got --policy lru");
  EXPECT_EQ(refusal([&] { make_policy("auto", o); }), "accepted");
  PolicyOptions page;
  page.set("um-page-size", "64KiB");
  EXPECT_EQ(refusal([&] { make_policy("dtr", page); }),
            "--um-page-size applies to --policy um or um-prefetch only, got --policy dtr");
  // A sweep: refused only where no listed policy declares it; each run gets its own flags.
  EXPECT_EQ(refusal([&] { check_policy_options(o, {"none", "auto"}); }), "accepted");
  EXPECT_EQ(refusal([&] { check_policy_options(o, {"none", "lru"}); }),
            "--auto-search applies to --policy auto only, got --policies none,lru");
  EXPECT_TRUE(o.only(find_policy("lru").options).values().empty());
  EXPECT_EQ(o.only(find_policy("auto").options).values().size(), 1u);
  // Every flag is registered once, whichever policies declare it.
  std::set<std::string> flags;
  for (const auto& opt : policy_options()) EXPECT_TRUE(flags.insert(opt.flag).second) << opt.flag;
  EXPECT_TRUE(flags.count("um-page-size") && flags.count("checkpoint-segments") && flags.count("auto-plan"));
}
