// The vtensor command: train a model under a device-memory budget and report what it cost.
#include "cli/cli.h"

int main(int argc, char** argv) { return vtensor::run_cli(argc, argv); }
