// Self-contained HTML pages (inline SVG, a few lines of JS, no network) from vtensor's JSON:
//   - a train / replay report with a memory timeline (--timeline): the last iteration's
//     allocated bytes after every op stacked by what holds them, the reserved bytes, the budget
//     line, and marks for swap-outs, prefetches, drops, recomputations and stalls; hovering an op
//     names it and its tensors (PyTorch's memory_viz shows the same view of a snapshot);
//   - a sweep (vtensor sweep --out X.json): overhead against budget per policy, one chart per
//     model and batch.
// The SVG is built here, not by the script, so a page can be checked without a browser: each
// op is one <g class="op">, the budget one <line id="budget">, and the root <svg> carries the
// scale (data-top, data-height, data-ymax).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace vtensor {

// The page for `doc`, a report or a sweep; throws std::invalid_argument naming what `source`
// lacks and what is accepted.
std::string view_html(const nlohmann::json& doc, const std::string& source);
std::string timeline_html(const nlohmann::json& report);
std::string sweep_html(const nlohmann::json& rows);

// Reads a JSON file (std::invalid_argument naming the file when it is missing or not JSON).
nlohmann::json read_json_file(const std::string& path);
// Writes through a temporary file and a rename: a failed write leaves nothing at `path`.
void write_file_atomically(const std::string& text, const std::string& path, const std::string& what);

}  // namespace vtensor
