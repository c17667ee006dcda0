// The vtensor command line (cli.cpp): main.cpp runs it; the CLI fuzz target (tests/fuzz) parses only.
#pragma once

namespace vtensor {

enum class CliMode {
  kRun,        // parse argv, then run the command
  kParseOnly,  // parse argv (printing --help or the parse error as the command does), run nothing
};

// The exit status: 0; 2 for bad input (a parse error included); 3 out of memory; 1 otherwise.
int run_cli(int argc, char** argv, CliMode mode = CliMode::kRun);

}  // namespace vtensor
