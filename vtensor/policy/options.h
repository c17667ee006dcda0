// A policy's own command-line options. Each policy declares its flags in its registry entry
// (PolicyInfo::options); the CLI registers every declared flag once per command that runs a
// policy and hands the values given, as text, to PolicyInfo::make, which reads them with the
// typed getters below. A getter throws std::invalid_argument naming the flag, what it accepts and
// what was given. make_policy refuses a flag the policy does not declare, naming the policies that
// do. Adding an option to a policy touches the policy's own file only.
#pragma once
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace vtensor {

struct PolicyOption {
  std::string flag;  // without the dashes: "auto-search"
  std::string help;
  bool input_file = false;  // a path the run reads: the CLI keeps outputs off it
  bool is_switch = false;   // takes no value (given: "true")
};

class PolicyOptions {
 public:
  // flag without the dashes; a number is written as the CLI would take it
  PolicyOptions& set(const std::string& flag, const std::string& value);
  PolicyOptions& set(const std::string& flag, const char* value) { return set(flag, std::string(value)); }
  template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  PolicyOptions& set(const std::string& flag, T value) {
    return set_number(flag, static_cast<double>(value));
  }
  PolicyOptions& erase(const std::string& flag) {
    values_.erase(flag);
    return *this;
  }
  bool given(const std::string& flag) const { return values_.count(flag) > 0; }
  const std::map<std::string, std::string>& values() const { return values_; }
  // The values whose flags `declared` holds (a sweep's run of one policy).
  PolicyOptions only(const std::vector<PolicyOption>& declared) const;

  // nullopt where the flag was not given.
  std::optional<std::string> text(const std::string& flag) const;
  // one of `accepted`: "--F must be a or b, got 'x'"
  std::optional<std::string> choice(const std::string& flag, const std::vector<std::string>& accepted) const;
  // a whole number >= 0 of rehearsals: "--F must be a rehearsal count >= 0 (0: zero_means), got x"
  std::optional<int> rehearsals(const std::string& flag, const std::string& zero_means) const;
  // a whole number above 0
  std::optional<int> positive(const std::string& flag) const;
  // a whole number (any sign; the policy checks its range)
  std::optional<int> whole(const std::string& flag) const;
  // seconds in [lo, hi] ((lo, hi] where lo_open); zero_means, where not empty, says what 0 does
  std::optional<double> seconds(const std::string& flag, double lo, double hi, bool lo_open = false,
                                const std::string& zero_means = {}) const;
  std::optional<size_t> bytes(const std::string& flag) const;  // parse_bytes: "2MiB", 4096
  std::vector<std::string> list(const std::string& flag) const;  // comma-separated, empty when not given

  // Not a flag: what the run tells a policy as it is made. False on cpu (or sim without a GPU)
  // without --budget: the default arena stands for "unlimited" (policy checkpoint then plans for
  // the lowest peak).
  bool budget_given = true;

 private:
  PolicyOptions& set_number(const std::string& flag, double value);
  std::map<std::string, std::string> values_;
};

}  // namespace vtensor
