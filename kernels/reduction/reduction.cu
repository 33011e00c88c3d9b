// reduction — block-level sum reduction.
//
// Computes: partial[b] = sum of in[i] over the elements visited by block b, using a grid-stride
// loop (each thread accumulates several elements), warp shuffles inside each warp, and one
// shared-memory slot per warp to combine the warps of a block. The host sums the partials
// (gridDim.x of them), or launches the kernel a second time on them.
// Launch: reduce_sum<<<blocks, BLOCK>>>(in, partial, n).
//
// Expected bottleneck: DRAM bandwidth (one float read per element, ~1 FLOP per 4 bytes); the
// block size BLOCK (co-tuned) trades occupancy against the cost of the block-level tail.
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
