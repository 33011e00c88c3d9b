#pragma once
#include <mylib/config.h>

namespace mylib {
__device__ inline float smooth(float a, float b) { return a + MYLIB_WEIGHT * (b - a); }
}  // namespace mylib
