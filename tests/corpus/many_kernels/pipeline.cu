// Several kernels with different block sizes: two from __launch_bounds__ in a header, one from
// the [launch] table (with its dynamic shared memory), launched with the tuned STAGE_BLOCK below.
#include "kernels.cuh"

// The host side launches stage with the tuned STAGE_BLOCK threads and as many floats of dynamic
// shared memory: what the [launch.stage] table tells the occupancy estimate.
#ifndef STAGE_BLOCK
#define STAGE_BLOCK 256
#endif
void launch_stage(const float* in, float* out, int n) {
    stage<<<(n + STAGE_BLOCK - 1) / STAGE_BLOCK, STAGE_BLOCK, STAGE_BLOCK * sizeof(float)>>>(in, out, n);
}
