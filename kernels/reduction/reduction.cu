// reduction — block-level sum reduction.
//
// Computes: partial[b] = sum of in[i] over the elements visited by block b, using a grid-stride
// loop (each thread accumulates several elements), warp shuffles inside each warp, and one
// shared-memory slot per warp to combine the warps of a block. A second launch of the same
// kernel with one block sums the partials, so the output (one float) does not depend on BLOCK.
// Launch: reduce_sum<<<blocks, BLOCK>>>(in, partial, n); reduce_sum<<<1, BLOCK>>>(partial,
//     total, blocks), blocks = 2048 (a fixed grid: ~4 waves of 256-thread blocks on 132 SMs).
//
// Default problem: n = 2^27 floats (537 MB).
// Expected bottleneck: DRAM bandwidth (one float read per element, 1 FLOP per 4 bytes):
// 537 MB at 4.8 TB/s is a ~0.11 ms floor; the second launch adds a few microseconds. The block
// size BLOCK (co-tuned) trades occupancy against the cost of the block-level tail.
//
// Reference: the full sum in double on the CPU (~0.2 s). Tolerance: atol 0.05, rtol 1e-5 — the
// total is ~6.7e3 in magnitude (a random walk of 2^27 values in [-1, 1)) and the fp32
// partial sums accumulate ~1e-2 of rounding in the worst case.
#include "compileiq/harness.cuh"  // found through include_dirs in tune.toml

#include <vector>
#ifndef BLOCK
#define BLOCK 256
#endif

#define WARP 32

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int offset = WARP / 2; offset > 0; offset >>= 1) {
        v += __shfl_down_sync(0xffffffffu, v, offset);
    }
    return v;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
reduce_sum(const float* __restrict__ in, float* __restrict__ partial, int n)
{
    __shared__ float warp_sums[BLOCK / WARP];
    float v = 0.0f;
    for (int i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += gridDim.x * BLOCK) {
        v += in[i];
    }
    v = warp_sum(v);
    const int lane = threadIdx.x % WARP;
    const int warp = threadIdx.x / WARP;
    if (lane == 0) {
        warp_sums[warp] = v;
    }
    __syncthreads();
    if (warp == 0) {
        v = lane < BLOCK / WARP ? warp_sums[lane] : 0.0f;
        v = warp_sum(v);
        if (lane == 0) {
            partial[blockIdx.x] = v;
        }
    }
}

int main(int argc, char** argv)
{
    ciq::Harness h(argc, argv);
    const int n = (int)h.size("n", 1 << 27), blocks = (int)h.size("blocks", 2048);
    auto in = h.input<float>("in", n);
    auto total = h.output<float>("total", 1);
    float* partial = nullptr;  // scratch between the two launches (fully rewritten each time)
    CIQ_CUDA(cudaMalloc(&partial, sizeof(float) * blocks));
    h.launch([&](cudaStream_t s) {
        reduce_sum<<<blocks, BLOCK, 0, s>>>(in.device(), partial, n);
        reduce_sum<<<1, BLOCK, 0, s>>>(partial, total.device(), blocks);
    });
    h.reference([&] {
        double sum = 0.0;
        for (float v : in.host()) sum += v;
        return h.compare(total, std::vector<float>{(float)sum}, 1e-5, 0.05);
    });
    const int rc = h.run();
    cudaFree(partial);
    return rc;
}
