#include "vtensor/train/report_html.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "vtensor/core/errors.h"
#include "vtensor/core/fault.h"
#include "vtensor/core/input.h"
#include "vtensor/core/output.h"

namespace vtensor {
namespace {

using nlohmann::json;

// Chart geometry (SVG user units).
constexpr double kLeft = 80, kTop = 30, kWidth = 1100, kHeight = 360;
constexpr double kMarkRow = 12;  // one row of event marks below the chart

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

// An integral field of a report (a batch, a byte or op count): a number in [0, max], or `def` when absent.
// Anything else is a malformed report; nlohmann's own cast of 1e20 to an integer is undefined.
uint64_t count_field(const json& o, const char* key, uint64_t def, double max = 1e15) {
  if (!o.is_object() || !o.contains(key)) return def;
  const json& v = o[key];
  if (v.is_number_unsigned()) {
    if (static_cast<double>(v.get<uint64_t>()) <= max) return v.get<uint64_t>();
  } else if (v.is_number()) {
    const double d = v.get<double>();
    if (d >= 0 && d <= max) return static_cast<uint64_t>(d);
  }
  throw std::invalid_argument(std::string("'") + key + "' is " + v.dump() + "; accepted: a number from 0 to " +
                              std::to_string(static_cast<uint64_t>(max)));
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}

std::string page(const std::string& title, const std::string& body) {
  return "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + esc(title) +
         "</title>\n<style>\n"
         "body{font:13px sans-serif;margin:16px;color:#222}h1{font-size:17px;margin:0 0 4px}"
         ".sub{color:#555;margin-bottom:8px}svg text{font:11px sans-serif;fill:#333}"
         ".axis{stroke:#888;stroke-width:1}.grid{stroke:#ddd;stroke-width:1}"
         ".budget{stroke:#c00;stroke-width:1.5;stroke-dasharray:6 3}.reserved{fill:none;stroke:#333;stroke-width:1}"
         "g.op:hover rect{opacity:.6}.legend span{display:inline-block;margin-right:14px}"
         ".legend i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px}"
         "#details{white-space:pre-wrap;font:12px monospace;background:#f6f6f6;padding:6px;min-height:3em}"
         "\n</style></head><body>\n" +
         body + "</body></html>\n";
}

// One per held category in stacking order, then "other (alignment)" last.
const char* const kHeldColors[] = {"#4e79a7", "#f28e2b", "#9c755f", "#59a14f", "#76b7b2", "#b07aa1", "#edc948", "#bab0ac"};
constexpr size_t kOtherColor = std::size(kHeldColors) - 1;
const char* const kPolicyColors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
                                     "#ff9da7", "#9c755f", "#bab0ac", "#17becf", "#7f7f7f", "#bcbd22", "#1f77b4"};

struct Mark {
  const char* column;  // the timeline column it reads
  const char* label;
  const char* color;
};
const Mark kMarks[] = {{"swap_outs", "swap-out", "#e15759"},   {"prefetches", "prefetch", "#4e79a7"},
                       {"dropped", "drop", "#9c755f"},          {"recomputed_ops", "recompute", "#59a14f"},
                       {"compressions", "compress", "#76b7b2"}, {"decompressions", "decompress", "#17becf"},
                       {"page_faults", "page fault", "#ff7f0e"}, {"page_prefetches", "page prefetch", "#1f77b4"},
                       {"compactions", "compaction", "#bcbd22"}, {"stall_ms", "stall", "#000000"}};

// Ticks at round steps (1, 2, 2.5 or 5 times a power of ten of the unit) up to ymax.
double nice_step(double ymax, double unit) {
  const double raw = ymax / 4 / unit, mag = std::pow(10, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw) return m * mag * unit;
  return 10 * mag * unit;
}

std::string y_axis(double ymax, bool bytes) {
  const double unit = !bytes ? 1.0 : ymax >= 4.0 * (1 << 30) ? double(1 << 30) : ymax >= 4.0 * (1 << 20) ? double(1 << 20) : 1024.0;
  const double step = nice_step(ymax, unit);
  std::string s;
  for (double v = 0; v <= ymax * (1 + 1e-9); v += step) {
    const double y = kTop + kHeight * (1 - v / ymax);
    s += "<line class=\"grid\" x1=\"" + num(kLeft) + "\" x2=\"" + num(kLeft + kWidth) + "\" y1=\"" + num(y) +
         "\" y2=\"" + num(y) + "\"/>";
    char label[64];
    if (bytes) std::snprintf(label, sizeof label, "%g %s", v / unit, unit == double(1 << 30) ? "GiB" : unit == double(1 << 20) ? "MiB" : "KiB");
    else std::snprintf(label, sizeof label, "%.2fx", v);
    s += "<text x=\"" + num(kLeft - 6) + "\" y=\"" + num(y + 4) + "\" text-anchor=\"end\">" + label + "</text>\n";
  }
  s += "<line class=\"axis\" x1=\"" + num(kLeft) + "\" x2=\"" + num(kLeft) + "\" y1=\"" + num(kTop) + "\" y2=\"" +
       num(kTop + kHeight) + "\"/>";
  return s;
}

// What the last iteration re-ran, by op kind (the report's recompute_by_kind), and its longest
// chain, as the page's line (empty where nothing was re-run).
std::string recomputed_html(const json& report) {
  std::string recomputed;
  if (const json& its = report.value("iterations", json::array()); its.is_array() && !its.empty()) {
    const json& kinds = its.back().value("recompute_by_kind", json::array());
    char b[96];
    for (const json& k : kinds) {
      if (!k.is_object()) continue;
      std::snprintf(b, sizeof b, " %llu (%.2f ms)", static_cast<unsigned long long>(count_field(k, "ops", 0)),
                    k.value("ms", 0.0));
      recomputed += (recomputed.empty() ? "" : ", ") + k.value("kind", std::string("?")) + b;
    }
    // and its longest chain: the most ops re-run for one restore
    const json& chains = its.back().value("recompute_chains", json::array());
    const json* longest = nullptr;
    auto ops = [](const json& c) { return count_field(c, "ops", 0); };
    for (const json& c : chains)  // as format_chain_line picks it: most ops, then most time
      if (c.is_object() && (!longest || ops(c) > ops(*longest) ||
                            (ops(c) == ops(*longest) && c.value("ms", 0.0) > longest->value("ms", 0.0))))
        longest = &c;
    if (longest && ops(*longest) > 1) {
      std::snprintf(b, sizeof b, "; longest chain %llu ops (%.2f ms) at ", static_cast<unsigned long long>(ops(*longest)),
                    longest->value("ms", 0.0));
      recomputed += b + longest->value("op_name", std::string("?")) + " for " + longest->value("tensor", std::string("?"));
    }
    if (!recomputed.empty())
      recomputed = "<div class=\"sub\" id=\"recomputed\">re-run in the last iteration, by op kind: " + esc(recomputed) + "</div>\n";
  }
  return recomputed;
}

// The legend: what holds the bytes, bottom to top, then the lines.
std::string legend_html(const std::vector<std::pair<std::string, size_t>>& held, bool paged) {
  std::string legend = "<div class=\"legend\">";
  for (size_t k = 0; k < held.size(); ++k)
    legend += "<span><i style=\"background:" + std::string(kHeldColors[k % kOtherColor]) + "\"></i>" + esc(held[k].first) + "</span>";
  legend += "<span><i style=\"background:" + std::string(kHeldColors[kOtherColor]) + "\"></i>other (alignment)</span>"
            "<span><i style=\"border-top:1px solid #333;height:0\"></i>reserved</span>" +
            std::string(paged ? "<span><i style=\"border-top:2px solid #0050c8;height:0\"></i>device pages in use "
                                "(unified memory: the bars count the managed range)</span>" : "") +
            "<span><i style=\"border-top:2px dashed #c00;height:0\"></i>budget</span></div>\n";
  return legend;
}

// A report's memory timeline as an SVG chart: per op, a bar stacked by what holds the bytes and
// the reserved bytes as a line, the event marks in rows below.
class TimelineChart {
 public:
  explicit TimelineChart(const json& report) {
    if (!report.is_object() || !report.contains("memory_timeline"))
      throw std::invalid_argument("the report has no memory timeline: run train or replay with --timeline (or --html)");
    const json& tl = report["memory_timeline"];
    const json& cols = tl.at("columns");
    points_ = &tl.at("points");
    ops_ = tl.contains("ops") ? tl["ops"] : json::array();
    if (!points_->is_array() || points_->empty()) throw std::invalid_argument("the report's memory timeline has no points");
    read_columns(cols);
    cfg_ = report.value("config", json::object());
    budget_ = cfg_.value("budget_bytes", 0.0);
    if (!(budget_ >= 0 && budget_ <= 1e15)) throw std::invalid_argument("config.budget_bytes out of range");
    ymax_ = budget_;
    for (const auto& p : *points_)
      ymax_ = std::max({ymax_, col(p, "reserved_bytes"), col(p, "allocated_bytes") + col(p, "held: workspace")});
    ymax_ = ymax_ > 0 ? ymax_ * 1.05 : 1;
    n_ = points_->size();
    bw_ = kWidth / static_cast<double>(n_);
    marks_top_ = kTop + kHeight + 8;
    svg_h_ = marks_top_ + kMarkRow * std::size(kMarks) + 24;
  }

  const json& config() const { return cfg_; }
  double budget() const { return budget_; }
  const std::vector<std::pair<std::string, size_t>>& held() const { return held_; }

  // The chart; paged is set where the timeline counts device pages (unified memory).
  std::string svg(bool& paged) const {
    std::ostringstream svg;
    svg << "<svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(kLeft + kWidth + 20) << "\" height=\""
        << num(svg_h_) << "\" data-top=\"" << num(kTop) << "\" data-height=\"" << num(kHeight) << "\" data-ymax=\""
        << num(ymax_) << "\" data-ops=\"" << n_ << "\">\n"
        << y_axis(ymax_, true);
    std::string reserved_line;
    for (size_t i = 0; i < n_; ++i) op_bar(svg, i, reserved_line);
    svg << "<polyline class=\"reserved\" points=\"" << reserved_line << "\"/>\n";
    paged = pages_line(svg);
    budget_and_labels(svg);
    return svg.str();
  }

 private:
  // The columns by name, and the held categories among them stacked bottom to top.
  void read_columns(const json& cols) {
    for (size_t i = 0; i < cols.size(); ++i) at_[cols[i].get<std::string>()] = i;
    for (const char* need : {"op_index", "allocated_bytes", "reserved_bytes"})
      if (!at_.count(need)) throw std::invalid_argument(std::string("the memory timeline has no column '") + need + "'");
    for (const auto& [name, i] : at_)
      if (name.rfind("held: ", 0) == 0) held_.emplace_back(name.substr(6), i);
    // Persistent state at the bottom, the op's transient workspace on top.
    const std::vector<std::string> order = {"parameters", "optimizer state", "gradients", "activations", "compressed",
                                            "in flight to / from host", "workspace"};
    std::sort(held_.begin(), held_.end(), [&](const auto& a, const auto& b) {
      auto rank = [&](const std::string& n) { return std::find(order.begin(), order.end(), n) - order.begin(); };
      return rank(a.first) < rank(b.first);
    });
  }

  // A timeline value is bytes or an op index: a negative, non-finite or larger than 1 PB one is a
  // malformed report (the casts to integers below would be undefined).
  double val(const json& p, size_t i) const {
    const double v = p.at(i).get<double>();
    if (!(v >= 0 && v <= 1e15)) throw std::invalid_argument("a memory timeline value out of range: " + p.at(i).dump());
    return v;
  }
  double col(const json& p, const std::string& name) const {
    const auto it = at_.find(name);
    return it != at_.end() ? val(p, it->second) : 0.0;
  }
  double y(double b) const { return kTop + kHeight * (1 - b / ymax_); }

  // Point i's tooltip: the op, its tensors, its memory.
  std::string op_title(size_t i, const json& p, double alloc, double resv) const {
    std::string title;
    if (i < ops_.size()) {
      const json& o = ops_[i];
      title = o.value("name", "") + " (" + o.value("kind", "") + ")\ninputs: ";
      for (const auto& t : o.value("inputs", json::array())) title += t.get<std::string>() + " ";
      title += "\noutputs: ";
      for (const auto& t : o.value("outputs", json::array())) title += t.get<std::string>() + " ";
    } else {
      title = "op " + std::to_string(static_cast<long long>(col(p, "op_index")));
    }
    title += "\nallocated " + format_bytes(static_cast<size_t>(alloc)) + ", reserved " + format_bytes(static_cast<size_t>(resv));
    return title;
  }

  // Point i's bar, title and marks; its piece of the reserved line.
  void op_bar(std::ostringstream& svg, size_t i, std::string& reserved_line) const {
    const json& p = (*points_)[i];
    const double x = kLeft + bw_ * static_cast<double>(i);
    const double alloc = col(p, "allocated_bytes"), resv = col(p, "reserved_bytes");
    std::string title = op_title(i, p, alloc, resv);
    svg << "<g class=\"op\" data-op=\"" << static_cast<long long>(col(p, "op_index")) << "\" data-allocated=\""
        << static_cast<long long>(alloc) << "\">";
    held_rects(svg, p, x, alloc, title);
    for (const Mark& m : kMarks)
      if (col(p, m.column) > 0) title += std::string("\n") + m.label + ": " + num(col(p, m.column));
    svg << "<title>" << esc(title) << "</title></g>\n";
    reserved_line += num(x) + "," + num(y(resv)) + " " + num(x + bw_) + "," + num(y(resv)) + " ";
    for (size_t r = 0; r < std::size(kMarks); ++r)
      if (col(p, kMarks[r].column) > 0)
        svg << "<rect class=\"mark\" data-mark=\"" << kMarks[r].label << "\" fill=\"" << kMarks[r].color << "\" x=\""
            << num(x) << "\" y=\"" << num(marks_top_ + kMarkRow * static_cast<double>(r)) << "\" width=\""
            << num(std::max(bw_, 2.0)) << "\" height=\"" << num(kMarkRow - 3) << "\"/>";
  }

  // The stacked rectangles of point p at x, each held category's bytes added to its title.
  void held_rects(std::ostringstream& svg, const json& p, double x, double alloc, std::string& title) const {
    double base = 0;
    for (size_t k = 0; k < held_.size(); ++k) {
      double b = val(p, held_[k].second);
      if (held_[k].first == "workspace") {
        // The residual (alignment, blocks no category names) goes below the workspace so the
        // stack's top without the workspace is exactly the allocated bytes.
        const double other = alloc - base;
        if (other > 0) {
          svg << "<rect fill=\"" << kHeldColors[kOtherColor] << "\" x=\"" << num(x) << "\" y=\"" << num(y(base + other))
              << "\" width=\"" << num(bw_) << "\" height=\"" << num(kHeight * other / ymax_) << "\"/>";
          base += other;
        }
      }
      if (b <= 0) continue;
      title += "\n  " + held_[k].first + ": " + format_bytes(static_cast<size_t>(b));
      svg << "<rect fill=\"" << kHeldColors[k % kOtherColor] << "\" x=\"" << num(x) << "\" y=\"" << num(y(base + b)) << "\" width=\""
          << num(bw_) << "\" height=\"" << num(kHeight * b / ymax_) << "\"/>";
      base += b;
    }
  }

  // Unified memory: the bars count the managed range, this line the device pages. False where
  // no point has device pages (and no line is drawn).
  bool pages_line(std::ostringstream& svg) const {
    bool paged = false;
    std::string line;
    for (size_t i = 0; i < n_; ++i) {
      const double b = col((*points_)[i], "device_page_bytes"), x = kLeft + bw_ * static_cast<double>(i);
      paged |= b > 0;
      line += num(x) + "," + num(y(b)) + " " + num(x + bw_) + "," + num(y(b)) + " ";
    }
    if (paged)
      svg << "<polyline id=\"device-pages\" fill=\"none\" stroke=\"#0050c8\" stroke-width=\"1.5\" points=\"" << line
          << "\"/>\n";
    return paged;
  }

  // The budget line, the mark rows' labels and the x axis' label.
  void budget_and_labels(std::ostringstream& svg) const {
    if (budget_ > 0)
      svg << "<line id=\"budget\" class=\"budget\" data-bytes=\"" << static_cast<long long>(budget_) << "\" x1=\"" << num(kLeft)
          << "\" x2=\"" << num(kLeft + kWidth) << "\" y1=\"" << num(y(budget_)) << "\" y2=\"" << num(y(budget_))
          << "\"/><text x=\"" << num(kLeft + kWidth) << "\" y=\"" << num(y(budget_) - 4) << "\" text-anchor=\"end\">budget "
          << format_bytes(static_cast<size_t>(budget_)) << "</text>\n";
    for (size_t r = 0; r < std::size(kMarks); ++r)
      svg << "<text x=\"" << num(kLeft - 6) << "\" y=\"" << num(marks_top_ + kMarkRow * static_cast<double>(r) + 9)
          << "\" text-anchor=\"end\">" << kMarks[r].label << "</text>";  // baseline in the row
    svg << "<text x=\"" << num(kLeft + kWidth / 2) << "\" y=\"" << num(svg_h_ - 4)
        << "\" text-anchor=\"middle\">ops of the last iteration, in order</text></svg>\n";
  }

  const json* points_ = nullptr;
  json ops_;
  json cfg_;
  std::map<std::string, size_t> at_;                  // column index by name
  std::vector<std::pair<std::string, size_t>> held_;  // stacked bottom to top
  double budget_ = 0, ymax_ = 0, bw_ = 0, marks_top_ = 0, svg_h_ = 0;
  size_t n_ = 0;
};

}  // namespace

std::string timeline_html(const json& report) {
  const TimelineChart chart(report);
  bool paged = false;
  const std::string svg = chart.svg(paged);
  const std::string legend = legend_html(chart.held(), paged);
  const json& cfg = chart.config();
  const double budget = chart.budget();
  const json& sum = report.value("summary", json::object());
  const std::string title = cfg.value("model", std::string("?")) + " under " + cfg.value("policy", std::string("?"));
  std::string sub = "backend " + cfg.value("backend", std::string("?"));
  if (cfg.contains("gpu") && cfg["gpu"].is_string()) sub += " (" + cfg["gpu"].get<std::string>() + ")";
  sub += ", batch " + std::to_string(count_field(cfg, "batch", 0, 1e9)) + ", budget " + format_bytes(static_cast<size_t>(budget)) +
         "; peak allocated " + format_bytes(count_field(sum, "peak_allocated_bytes", 0)) + ", peak reserved " +
         format_bytes(count_field(sum, "peak_reserved_bytes", 0)) + "; memory after each op of the last iteration, "
         "stacked by what holds it; the workspace is the op's own scratch, freed after it";
  const std::string recomputed = recomputed_html(report);
  const std::string js =
      "<script>\nconst d=document.getElementById('details');\n"
      "for(const g of document.querySelectorAll('g.op')){g.addEventListener('mouseenter',()=>{"
      "d.textContent=g.querySelector('title').textContent;});}\n</script>\n";
  return page(title, "<h1>" + esc(title) + "</h1><div class=\"sub\">" + esc(sub) + "</div>" + legend + svg +
                         "<div id=\"details\">hover an op</div>\n" + recomputed + js);
}

std::string sweep_html(const json& rows) {
  if (!rows.is_array() || rows.empty()) throw std::invalid_argument("the sweep has no rows");
  // One chart per (model, batch): overhead against the budget as a fraction of the unmanaged peak.
  std::map<std::pair<std::string, int>, std::vector<const json*>> groups;
  for (const auto& r : rows) {
    if (!r.is_object() || !r.contains("policy") || !r.contains("budget_bytes"))
      throw std::invalid_argument("a sweep row lacks 'policy' or 'budget_bytes'");
    groups[{r.value("model", std::string("?")), static_cast<int>(count_field(r, "batch", 0, 1e9))}].push_back(&r);
  }
  std::string body = "<h1>Overhead against budget, per policy</h1><div class=\"sub\">time per iteration against the "
                     "unmanaged run (none, no budget); x: the budget as a fraction of the unmanaged peak; "
                     "&times;: out of memory</div>\n";
  for (const auto& [key, rs] : groups) {
    std::vector<std::string> policies;
    double xmax = 0, ymax = 1;
    for (const json* r : rs) {
      const std::string p = (*r)["policy"];
      if (std::find(policies.begin(), policies.end(), p) == policies.end()) policies.push_back(p);
      const double peak = r->value("unmanaged_peak_bytes", 0.0);
      if (peak > 0) xmax = std::max(xmax, r->value("budget_bytes", 0.0) / peak);
      if (r->value("status", std::string()) == "ok") ymax = std::max(ymax, r->value("overhead", 0.0));
    }
    xmax = xmax > 0 ? xmax * 1.05 : 1;
    ymax *= 1.1;
    auto xs = [&](double f) { return kLeft + kWidth * f / xmax; };
    auto ys = [&](double o) { return kTop + kHeight * (1 - o / ymax); };
    std::ostringstream svg;
    svg << "<h2>" << esc(key.first) << ", batch " << key.second << "</h2>\n<svg class=\"sweep\" xmlns=\"http://www.w3.org/2000/svg\" width=\""
        << num(kLeft + kWidth + 20) << "\" height=\"" << num(kTop + kHeight + 40) << "\">" << y_axis(ymax, false);
    for (int i = 0; i <= 4; ++i) {
      const double f = xmax * i / 4;
      svg << "<text x=\"" << num(xs(f)) << "\" y=\"" << num(kTop + kHeight + 16) << "\" text-anchor=\"middle\">"
          << num(100 * f) << "%</text>";
    }
    std::string legend = "<div class=\"legend\">";
    for (size_t k = 0; k < policies.size(); ++k) {
      const char* color = kPolicyColors[k % std::size(kPolicyColors)];
      std::vector<std::pair<double, const json*>> pts;
      for (const json* r : rs)
        if ((*r)["policy"] == policies[k] && r->value("unmanaged_peak_bytes", 0.0) > 0)
          pts.emplace_back(r->value("budget_bytes", 0.0) / r->value("unmanaged_peak_bytes", 1.0), r);
      std::sort(pts.begin(), pts.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      std::string line;
      for (const auto& [f, r] : pts) {
        const std::string label = esc(policies[k] + " at " + r->value("budget", std::string()));
        if (r->value("status", std::string()) == "ok") {
          line += num(xs(f)) + "," + num(ys(r->value("overhead", 0.0))) + " ";
          svg << "<circle fill=\"" << color << "\" cx=\"" << num(xs(f)) << "\" cy=\"" << num(ys(r->value("overhead", 0.0)))
              << "\" r=\"3\"><title>" << label << ": " << num(r->value("overhead", 0.0)) << "x</title></circle>";
        } else {
          svg << "<text class=\"oom\" fill=\"" << color << "\" x=\"" << num(xs(f)) << "\" y=\"" << num(kTop + 10)
              << "\" text-anchor=\"middle\">&#215;<title>" << label << ": out of memory</title></text>";
        }
      }
      svg << "<polyline class=\"policy\" data-policy=\"" << esc(policies[k]) << "\" fill=\"none\" stroke=\"" << color
          << "\" stroke-width=\"1.5\" points=\"" << line << "\"/>\n";
      legend += "<span><i style=\"background:" + std::string(color) + "\"></i>" + esc(policies[k]) + "</span>";
    }
    svg << "</svg>\n";
    body += legend + "</div>" + svg.str();
  }
  return page("vtensor sweep", body);
}

std::string view_html(const json& doc, const std::string& source) {
  const bool timeline = doc.is_object() && doc.contains("memory_timeline");
  const bool sweep = doc.is_array() && !doc.empty() && doc[0].is_object() && doc[0].contains("policy") &&
                     doc[0].contains("budget_bytes");
  if (!timeline && doc.is_object() && doc.contains("config") && doc.contains("iterations"))
    throw std::invalid_argument("'" + source + "' is a report without a memory timeline: rerun train or replay with "
                                "--timeline (or --html)");
  if (!timeline && !sweep)
    throw std::invalid_argument("'" + source + "' is neither a report with a memory timeline nor a sweep; accepted: the "
                                "JSON of train / replay --report with --timeline, or of sweep --out X.json");
  // A field of the wrong type or out of range (a hand-edited or foreign file) is bad input, not a crash.
  auto malformed = [&](const std::string& what) {
    return std::invalid_argument("'" + source + "' is malformed: " + what +
                                 "; accepted: the JSON of train / replay --report with --timeline, or of sweep --out X.json");
  };
  try {
    return timeline ? timeline_html(doc) : sweep_html(doc);
  } catch (const json::exception& e) {
    throw malformed(e.what());
  } catch (const std::invalid_argument& e) {
    throw malformed(e.what());
  }
}

json read_json_file(const std::string& path) {
  return read_json(path, "'" + path + "'");  // bounded: size, nesting, numbers
}

void write_file_atomically(const std::string& text, const std::string& path, const std::string& what) {
  write_output(path, what, text);
}

}  // namespace vtensor
