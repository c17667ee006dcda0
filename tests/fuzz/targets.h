// The fuzz targets: one function per parser a user feeds. Each returns normally when the parser
// accepts its input or rejects it with std::invalid_argument (the documented way bad input
// fails); any other exception, a crash or a sanitizer report is a finding. fuzz_main.cpp makes one
// libFuzzer binary of each (scripts/fuzz.sh); the unit tests (test_fuzz_corpus.cpp) feed them
// every file under tests/fuzz/<name>/: the seeds and the inputs that once failed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace vtensor {
class Graph;
}

namespace vtensor::fuzz {

void trace(const uint8_t* data, size_t size);     // vtensor access traces (JSON lines), read_vtensor_trace
void dtr_log(const uint8_t* data, size_t size);   // DTR operator logs, read_dtr_log
void gpu_file(const uint8_t* data, size_t size);  // --gpu-file JSON, read_gpu_specs
void sizes(const uint8_t* data, size_t size);     // --budget / --budgets / --batches / ... strings
void cli(const uint8_t* data, size_t size);       // argv, one argument a line, parsed as `vtensor` parses it
void plan(const uint8_t* data, size_t size);      // --auto-plan JSON, AutoPolicy::load_plan, then run on sim
void densities(const uint8_t* data, size_t size); // --densities JSON, read_densities
void view(const uint8_t* data, size_t size);      // a report or a sweep for `vtensor view`, view_html
void weights(const uint8_t* data, size_t size);   // a safetensors file for train --init, parse_safetensors
// What `plan` loads its input against (resnet-tiny with its backward, at 1 MiB): a seed for
// another graph is refused at its fingerprint and fuzzes nothing past it.
const Graph& plan_graph();
constexpr size_t kPlanBudget = size_t{1} << 20;

struct Target {
  const char* name;  // also the seed directory, tests/fuzz/<name>
  void (*run)(const uint8_t*, size_t);
};
const std::vector<Target>& targets();

}  // namespace vtensor::fuzz
