// One libFuzzer binary per target: built with -DVTENSOR_FUZZ_TARGET=<name> (CMakeLists.txt, VTENSOR_FUZZ).
#include "tests/fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  vtensor::fuzz::VTENSOR_FUZZ_TARGET(data, size);
  return 0;
}
