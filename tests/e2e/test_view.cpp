// The memory timeline (what holds the device bytes after each op, the events between points)
// and the HTML pages `vtensor view` / `--html` make of reports and sweeps; headless Chromium
// opens one when it is installed (scripts/install.sh installs it with VTENSOR_BROWSER_TESTS=1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "tests/support/cli.h"
#include "tests/support/logs.h"
#include "vtensor/train/trainer.h"

using namespace vtensor;
using nlohmann::json;
using vtensor::test::run_cli;

namespace {

std::string temp(const std::string& name) { return vtensor::test::temp_path("view", name); }

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double attr(const std::string& text, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(name + "=\"([-0-9.]+)\""))) return NAN;
  return std::stod(m[1]);
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TrainResult run_with_timeline(const std::string& policy, size_t budget) {
  TrainConfig cfg;
  cfg.model.name = "resnet-tiny";
  cfg.policy = policy;
  cfg.budget = budget;
  cfg.iters = 2;
  cfg.timeline = true;
  Trainer t(cfg);
  return t.run();
}

size_t held(const TimelinePoint& p, HeldBy h) { return p.held[static_cast<size_t>(h)]; }

}  // namespace

TEST(Timeline, HeldBytesNameWhatHoldsThemAndEventsAddUpToTheIteration) {
  TrainResult none = run_with_timeline("none", 0);
  Trainer probe(none.config);
  size_t params = 0, optimizer_state = 0;
  for (const auto& t : probe.graph().tensors()) {
    if (t.kind == TensorKind::kParam || t.kind == TensorKind::kBuffer) params += t.bytes();
    if (t.kind == TensorKind::kOptimizerState) optimizer_state += t.bytes();
  }
  ASSERT_EQ(none.timeline.size(), none.num_ops);
  bool some_workspace = false;
  for (const auto& p : none.timeline) {
    EXPECT_EQ(held(p, HeldBy::kParameters), params) << p.op_index;
    EXPECT_EQ(held(p, HeldBy::kOptimizerState), optimizer_state) << p.op_index;
    EXPECT_EQ(held(p, HeldBy::kInFlight), 0u);
    size_t sum = 0;
    for (size_t h = 0; h < kHeldByCount; ++h)
      if (h != static_cast<size_t>(HeldBy::kWorkspace)) sum += p.held[h];
    EXPECT_LE(sum, p.allocated) << p.op_index;
    EXPECT_GE(sum + 512 * 64, p.allocated) << p.op_index;  // only alignment between them
    some_workspace |= held(p, HeldBy::kWorkspace) > 0;
  }
  EXPECT_TRUE(some_workspace);  // the convolutions' im2col scratch
  // lru at half the peak swaps: the events between points add up to the iteration's counters.
  size_t peak = 0;
  for (const auto& s : none.iterations) peak = std::max(peak, s.peak_allocated);
  TrainResult lru = run_with_timeline("lru", peak / 2);
  uint64_t outs = 0, ins = 0;
  for (const auto& p : lru.timeline) {
    outs += p.events.swap_outs;
    ins += p.events.swap_ins;
  }
  const auto& last = lru.iterations.back().counters;
  EXPECT_GT(last.swap_outs, 0u);
  EXPECT_EQ(outs, last.swap_outs);
  EXPECT_EQ(ins, last.swap_ins);
}

// Under unified memory the points count the device pages in use and the page faults and
// prefetches between them; they add up to the iteration's paging counters.
TEST(Timeline, UnderUnifiedMemoryPointsCountPagesFaultsAndPrefetches) {
  for (const std::string policy : {"um", "um-prefetch"}) {
    SCOPED_TRACE(policy);
    TrainConfig cfg;
    cfg.model.name = "resnet-tiny";
    cfg.policy = policy;
    cfg.budget = size_t{1856} << 10;
    cfg.policy_options.set("um-page-size", size_t{16} << 10);
    cfg.iters = 3;
    cfg.timeline = true;
    Trainer t(cfg);
    const TrainResult r = t.run();
    const auto& paging = r.iterations.back().paging;
    uint64_t faults = 0, prefetches = 0;
    size_t most = 0;
    for (const auto& p : r.timeline) {
      faults += p.page_faults;
      prefetches += p.page_prefetches;
      most = std::max(most, p.device_page_bytes);
      EXPECT_LE(p.device_page_bytes, cfg.budget);
    }
    EXPECT_EQ(faults, paging.faults);
    EXPECT_EQ(prefetches, paging.prefetches);
    EXPECT_GT(most, 0u);
    if (policy == "um") EXPECT_GT(faults, 0u);
    else EXPECT_GT(prefetches, 0u);
  }
}

TEST(CliView, TimelinePageHasOneBarPerOpAndTheBudgetAtItsHeight) {
  const std::string html = temp("t.html"), report = temp("t.json");
  auto r = run_cli("train --model resnet-tiny --policy lru --budget 1.8MiB --iters 2 --quiet --html " + html +
                   " --report " + report);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("memory timeline written to"), std::string::npos);
  const std::string page = slurp(html);
  const json rep = json::parse(slurp(report));
  const json& points = rep["memory_timeline"]["points"];
  ASSERT_EQ(points.size(), rep["graph"]["ops"].get<size_t>());
  EXPECT_EQ(count(page, "<g class=\"op\""), points.size());
  EXPECT_EQ(attr(page, "data-ops"), static_cast<double>(points.size()));
  EXPECT_GT(count(page, "data-mark=\"swap-out\""), 0u);
  EXPECT_NE(page.find("layer1.0.relu (relu)"), std::string::npos);  // hover names the op
  // The budget line sits at top + height * (1 - budget / ymax).
  const double top = attr(page, "data-top"), h = attr(page, "data-height"), ymax = attr(page, "data-ymax");
  const double budget = rep["config"]["budget_bytes"].get<double>();
  EXPECT_NEAR(attr(page, "id=\"budget\" class=\"budget\" data-bytes=\"[0-9]+\" x1=\"[-0-9.]+\" x2=\"[-0-9.]+\" y1"),
              top + h * (1 - budget / ymax), 0.01);
  // Each op's stack is its allocated bytes plus the scratch it used, on the same scale.
  const auto& cols = rep["memory_timeline"]["columns"];
  const size_t ws = std::find(cols.begin(), cols.end(), "held: workspace") - cols.begin();
  std::regex group("<g class=\"op\" data-op=\"([0-9]+)\" data-allocated=\"([0-9]+)\">(.*?)<title>");
  std::regex height("height=\"([0-9.]+)\"");
  size_t i = 0;
  for (auto it = std::sregex_iterator(page.begin(), page.end(), group); it != std::sregex_iterator(); ++it, ++i) {
    const std::string rects = (*it)[3];
    double sum = 0;
    for (auto hit = std::sregex_iterator(rects.begin(), rects.end(), height); hit != std::sregex_iterator(); ++hit)
      sum += std::stod((*hit)[1]);
    const double bytes = points[i][1].get<double>() + points[i][ws].get<double>();
    EXPECT_NEAR(sum, h * bytes / ymax, 0.05) << "op " << (*it)[1];
  }
  EXPECT_EQ(i, points.size());
  EXPECT_EQ(page.find("id=\"recomputed\""), std::string::npos);  // lru swaps only
  std::filesystem::remove(html);
  std::filesystem::remove(report);
}

// The page says what the last iteration re-ran, by op kind, as the report's recompute_by_kind.
TEST(CliView, TheRecomputationsByKindAreOnThePage) {
  const std::string html = temp("rec.html"), report = temp("rec.json");
  auto r = run_cli("train --model resnet-tiny --policy lru-recompute --budget 1.2MiB --iters 2 --quiet --html " + html +
                   " --report " + report);
  ASSERT_EQ(r.code, 0) << r.output;
  const json kinds = json::parse(slurp(report))["iterations"].back()["recompute_by_kind"];
  ASSERT_FALSE(kinds.empty());
  const std::string page = slurp(html);
  const size_t at = page.find("id=\"recomputed\"");
  ASSERT_NE(at, std::string::npos);
  for (const json& k : kinds)
    EXPECT_NE(page.find(k["kind"].get<std::string>() + " " + std::to_string(k["ops"].get<int>()) + " (", at), std::string::npos);
  EXPECT_NE(r.output.find("recompute, last iteration: "), std::string::npos);
  // and the longest chain, named as the console names it
  const std::string chain_run = "train --model resnet-tiny --policy checkpoint --iters 2 --quiet --html " + html;
  r = run_cli(chain_run);
  ASSERT_EQ(r.code, 0) << r.output;
  const size_t named = r.output.find("longest recompute chain: ");
  ASSERT_NE(named, std::string::npos) << r.output;
  const std::string ops = r.output.substr(named + 25, r.output.find(" ops", named) - named - 25);
  EXPECT_NE(slurp(html).find("; longest chain " + ops + " ops ("), std::string::npos) << ops;
  std::filesystem::remove(html);
  std::filesystem::remove(report);
}

// A compaction is an event of the timeline like a swap: a log whose guided iterations compact
// once (test::write_fragmenting_log, also Capuchin's fragmentation test) shows it at its op in
// the report's points, with the bytes it moved, and as a mark on the page.
TEST(CliView, CompactionIsAMarkAtItsOp) {
  const std::string log = temp("fragment.log"), report = temp("frag.json"), html = temp("frag.html");
  vtensor::test::write_fragmenting_log(log);
  auto r = run_cli("replay --trace " + log + " --gpu p100-16g --budget 10MiB --policy capuchin --iters 3 --report " + report +
                   " --html " + html);
  ASSERT_EQ(r.code, 0) << r.output;
  const json rep = json::parse(slurp(report));
  const auto& cols = rep["memory_timeline"]["columns"];
  const size_t n = std::find(cols.begin(), cols.end(), "compactions") - cols.begin();
  const size_t moved = std::find(cols.begin(), cols.end(), "compacted_bytes") - cols.begin();
  ASSERT_LT(moved, cols.size());
  double compactions = 0, bytes = 0;
  for (const auto& p : rep["memory_timeline"]["points"]) compactions += p[n].get<double>(), bytes += p[moved].get<double>();
  const json& last = rep["iterations"].back();
  EXPECT_EQ(compactions, last["compactions"].get<double>());
  EXPECT_EQ(bytes, last["compacted_bytes"].get<double>());
  EXPECT_EQ(bytes, 2.0 * (1 << 20));  // c slides down into b's hole
  EXPECT_EQ(count(slurp(html), "data-mark=\"compaction\""), 1u);
  for (const auto& f : {log, report, html}) std::filesystem::remove(f);
}

TEST(CliView, SweepPageDrawsOneLinePerPolicy) {
  const std::string sweep = temp("s.json"), html = temp("s.html");
  ASSERT_EQ(run_cli("sweep --model resnet-tiny --gpu p100-16g --policies none,lru,dtr --budgets 100%,50%,30% --out " + sweep).code, 0);
  auto r = run_cli("view " + sweep + " -o " + html);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string page = slurp(html);
  for (const std::string p : {"none", "lru", "dtr"}) EXPECT_EQ(count(page, "data-policy=\"" + p + "\""), 1u) << p;
  EXPECT_GT(count(page, "class=\"oom\""), 0u);  // none below 100%
  std::filesystem::remove(sweep);
  std::filesystem::remove(html);
}

TEST(CliView, BadInputExitsTwoAndWritesNothing) {
  const std::string out = temp("never.html");
  const std::string no_timeline = temp("plain.json"), not_json = temp("bad.json"), wrong_type = temp("wrong.json");
  ASSERT_EQ(run_cli("train --model mlp-tiny --iters 1 --quiet --report " + no_timeline).code, 0);
  std::ofstream(not_json) << "{ not json";
  ASSERT_EQ(run_cli("train --model mlp-tiny --iters 1 --quiet --timeline --report " + wrong_type).code, 0);
  {  // a field of the wrong type, as a hand-edited report has
    json rep = json::parse(slurp(wrong_type));
    rep["summary"]["peak_allocated_bytes"] = "a lot";
    std::ofstream(wrong_type) << rep.dump();
  }
  const std::pair<std::string, std::string> cases[] = {
      {"view " + temp("missing.json") + " -o " + out, "cannot read"},
      {"view " + not_json + " -o " + out, "is not JSON"},
      {"view " + wrong_type + " -o " + out, "is malformed"},
      {"view " + no_timeline + " -o " + out, "--timeline"},
      {"view " + no_timeline + " -o /no/such/dir/x.html", "does not exist"},
      {"view " + no_timeline, "--out"},
      {"train --model mlp-tiny --iters 1 --html /no/such/dir/x.html", "--html"}};
  for (const auto& [args, message] : cases) {
    auto r = run_cli(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << args << ": " << r.output;
    EXPECT_FALSE(std::filesystem::exists(out));
  }
  std::filesystem::remove(no_timeline);
  std::filesystem::remove(not_json);
  std::filesystem::remove(wrong_type);
}

// Paper scale: ResNet-50 at batch 32 under capuchin at half its unmanaged peak (sim), opened in
// headless Chromium; the screenshot stays in the build directory.
TEST(Browser, ResNet50UnderCapuchinRendersInChromium) {
  std::string chromium;
  for (const char* c : {"chromium", "chromium-browser", "google-chrome"})
    if (std::system((std::string("command -v ") + c + " >/dev/null 2>&1").c_str()) == 0) {
      chromium = c;
      break;
    }
  if (chromium.empty()) GTEST_SKIP() << "no chromium here (scripts/install.sh installs it with VTENSOR_BROWSER_TESTS=1)";
  const std::string dir = VTENSOR_BUILD_DIR;
  const std::string html = dir + "/resnet50_capuchin_50.html", png = dir + "/resnet50_capuchin_50.png";
  auto r = run_cli("train --model resnet50 --batch 32 --backend sim --gpu p100-16g --policy capuchin --budget 1468114688 "
                   "--iters 3 --quiet --html " + html);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string flags = " --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1220,560 ";
  std::filesystem::remove(png);
  const std::string dom = temp("dom.html");
  ASSERT_EQ(std::system((chromium + flags + "--dump-dom file://" + html + " > " + dom + " 2>/dev/null").c_str()), 0);
  const std::string live = slurp(dom);
  EXPECT_EQ(count(live, "<g class=\"op\""), static_cast<size_t>(attr(live, "data-ops")));
  EXPECT_GT(attr(live, "data-ops"), 500.0);  // ResNet-50's training step
  EXPECT_NE(live.find("id=\"budget\""), std::string::npos);
  ASSERT_EQ(std::system((chromium + flags + "--screenshot=" + png + " file://" + html + " >/dev/null 2>&1").c_str()), 0);
  ASSERT_TRUE(std::filesystem::exists(png));
  EXPECT_GT(std::filesystem::file_size(png), 10000u);  // a picture, not a blank page
  std::filesystem::remove(dom);
}
