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
//
// Default problem: n = 2^25 (x and y 134 MB each, coef 512 B). Per element: 64 gathered loads
// (mostly L1/L2 hits: the 64 taps of neighbouring threads overlap), 8 x 64 x (FMA + MUL) and
// 64 FMA -> ~1.66 kFLOP, so ~56 GFLOP in all: a ~0.83 ms fp32 floor on an H200 (~67 TFLOP/s),
// plus 64 integer modulos per element; DRAM (268 MB, 0.06 ms) is not the limit. Spilled
// variants add local-memory traffic (L1/L2) on top.
//
// Reference: the full CPU reference (~56 GFLOP) would take ~30 s, so --check recomputes every
// 509th element and the last 64, in double. Tolerance: rtol 1e-4, atol 1e-5 (|y| ~ 0.4..2;
// 8 rounds of fp32 FMA on values in [-1, 1) round at ~1e-7 relative).
#include "compileiq/harness.cuh"  // found through include_dirs in tune.toml

#include <vector>
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

int main(int argc, char** argv)
{
    ciq::Harness h(argc, argv);
    const int n = (int)h.size("n", 1 << 25);
    auto x = h.input<float>("x", n);
    auto coef = h.input<float>("coef", 2 * TAPS);
    auto y = h.output<float>("y", n);
    h.launch([&](cudaStream_t s) {
        spill_heavy<<<(n + 255) / 256, 256, 0, s>>>(x.device(), coef.device(), y.device(), n);
    });
    h.reference([&] {
        // Subset check (see the header comment); the harness itself checks that every element
        // of y was written.
        const std::vector<float>&hx = x.host(), &hc = coef.host();
        const std::vector<float> got = y.fetch();
        std::vector<float> sub_got, sub_ref;
        std::vector<int> sample;
        for (int i = 0; i < n; i += 509) sample.push_back(i);
        for (int i = n > 64 ? n - 64 : 0; i < n; ++i) sample.push_back(i);
        double acc[TAPS], next[TAPS];
        for (int i : sample) {
            for (int k = 0; k < TAPS; ++k) acc[k] = hx[((size_t)i + (size_t)k * 131) % n];
            for (int round = 0; round < ROUNDS; ++round) {
                // The GPU updates acc[k] in place for k = 0..TAPS-1, so acc[k + 1] is still the
                // old value except for k = TAPS - 1, which reads the already-updated acc[0].
                for (int k = 0; k < TAPS; ++k) {
                    const double right = k + 1 < TAPS ? acc[k + 1] : next[0];
                    next[k] = acc[k] * hc[k] + right * hc[TAPS + k];
                }
                for (int k = 0; k < TAPS; ++k) acc[k] = next[k];
            }
            double s = 0.0;
            for (int k = 0; k < TAPS; ++k) s += acc[k] * acc[(k * 7) % TAPS];
            sub_got.push_back(got[i]);
            sub_ref.push_back((float)s);
        }
        return h.compare(sub_got, sub_ref, 1e-4, 1e-5);
    });
    return h.run();
}
