// Densities file: the non-zero counts of the tensors a compression policy measured on a backend
// with data (cpu, cuda), written by `train --densities-out FILE` and read by the sim backend
// (`--densities FILE`), so compressed sizes on sim come from real data, never a typed-in ratio.
// JSON: {"format": "vtensor-densities-1", "source": "...", "tensors": {NAME: {"elements": N, "nonzeros": K}}}.
// Densities (K / N) carry over to another batch of the same model: names do not depend on it.
#pragma once
#include <string>

#include "vtensor/backend/backend.h"

namespace vtensor {

constexpr const char* kDensitiesFormat = "vtensor-densities-1";

// Throws std::invalid_argument naming the file and what is wrong with it.
DensityTable load_densities(const std::string& path);
// The same from the file's text; `path` names it in the messages (the fuzz target feeds this).
DensityTable read_densities(const std::string& text, const std::string& path);
// Atomically (a temporary file renamed): a failed write leaves nothing half-written.
void write_densities(const DensityTable& d, const std::string& path);

}  // namespace vtensor
