// spill_heavy — a register-hungry recurrence: the demo kernel for `--objective spills`.
//
// Computes: each thread loads TAPS floats x[(i + 131 k) mod n] into a fully unrolled local
// array, runs 8 rounds of acc[k] = acc[k] * coef[k] + acc[k+1] * coef[TAPS + k] (a coupled
// linear recurrence, so all TAPS values stay live), then writes
// y[i] = sum_k acc[k] * acc[7k mod TAPS].
// Launch: spill_heavy<<<ceil(n / 256), 256>>>(x, coef, y, n), coef holds 2 * TAPS floats.
//
// Expected bottleneck: registers. __launch_bounds__(256, 2) caps ptxas at 128 registers per
// thread, but ~214 values are live, so the default build spills to local memory; the spill
// traffic (not DRAM) then dominates. Measured with ptxas 13.0 on the PTX of `nvcc -arch=sm_90
// -ptx` (TAPS = 64; spill stores / spill loads in bytes, registers):
//   (defaults)                                              336 / 336, 128 regs
//   -O0                                                     612 / 612, 128 regs
//   -O1                                                     312 / 312, 128 regs
//   -O2, --allow-expensive-optimizations true               336 / 336, 128 regs
//   --register-usage-level 0                                312 / 312, 128 regs
//   --register-usage-level 10                               336 / 336, 128 regs
//   --override-directive-values -maxrregcount 160           184 / 184, 160 regs
//   --override-directive-values -maxrregcount 255             0 / 0,   214 regs
//   --override-directive-values -maxntid 256 -minnctapersm 1  0 / 0,   214 regs
//   -maxrregcount 255 (without --override-directive-values)  336 / 336, 128 regs (directive wins)
// Removing the spills costs occupancy (214 registers -> 1 block of 256 threads per SM), which
// is exactly the trade-off a runtime measurement has to settle.
#ifndef TAPS
#define TAPS 64
#endif

#define ROUNDS 8

extern "C" __global__ void __launch_bounds__(256, 2)
spill_heavy(const float* __restrict__ x, const float* __restrict__ coef, float* __restrict__ y,
            int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    float acc[TAPS];
#pragma unroll
    for (int k = 0; k < TAPS; ++k) {
        acc[k] = x[(i + k * 131) % n];
    }
#pragma unroll 1
    for (int round = 0; round < ROUNDS; ++round) {
#pragma unroll
        for (int k = 0; k < TAPS; ++k) {
            acc[k] = fmaf(acc[k], coef[k], acc[(k + 1) % TAPS] * coef[TAPS + k]);
        }
    }
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < TAPS; ++k) {
        s += acc[k] * acc[(k * 7) % TAPS];
    }
    y[i] = s;
}
