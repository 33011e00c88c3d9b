// A helper header shared by every app of the project, found through an -I to a sibling folder
// (as a samples repository's apps/NAME/ -> ../../common layout needs).
#pragma once
#define SCALE_FACTOR 3.0f

__device__ __forceinline__ float scaled(float x) { return x * SCALE_FACTOR; }
