// softmax — numerically stable row softmax, one block per row.
//
// Computes: for each row r of a row-major rows x cols matrix,
// out[r][j] = exp(in[r][j] - max_r) / sum_k exp(in[r][k] - max_r). Block r makes three passes
// over its row (max, sum of exponentials, normalised write); the max and the sum are
// block-wide reductions through warp shuffles and one shared slot per warp.
// Launch: softmax_rows<<<rows, 256>>>(in, out, rows, cols).
//
// Default problem: rows = 32768, cols = 2048 floats (268 MB in, 268 MB out).
// Expected bottleneck: DRAM bandwidth for long rows (the row is read three times and written
// once; the 8 KB row stays in L1/L2 after the first read): 537 MB at 4.8 TB/s is a ~0.11 ms
// floor; 2 expf per element (134 M, SFU) stay well below it. The block-reduction latency
// dominates for short rows. expf makes it sensitive to --use_fast_math (allowed here, subject
// to the output check).
//
// Reference: the full softmax in double on the CPU (~1 s). Tolerance: rtol 1e-4, atol 1e-9 —
// outputs are ~1/2048 (inputs in [-1, 1)); fast-math expf/division stay within a few ulp.
#include "compileiq/harness.cuh"  // found through include_dirs in tune.toml

#include <cmath>
#include <vector>

#define THREADS 256
#define WARP 32

__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int offset = WARP / 2; offset > 0; offset >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    }
    return v;
}

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int offset = WARP / 2; offset > 0; offset >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, offset);
    }
    return v;
}

// Combines one value per thread into a block-wide result every thread receives.
template <bool IsMax>
__device__ float block_reduce(float v, float* scratch)
{
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    v = IsMax ? warp_max(v) : warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < THREADS / WARP ? scratch[lane] : (IsMax ? -INFINITY : 0.0f);
    v = IsMax ? warp_max(v) : warp_sum(v);
    __syncthreads();  // scratch is reused by the next reduction
    return v;
}

extern "C" __global__ void __launch_bounds__(THREADS)
softmax_rows(const float* __restrict__ in, float* __restrict__ out, int rows, int cols)
{
    __shared__ float scratch[THREADS / WARP];
    const int r = blockIdx.x;
    if (r >= rows) return;
    const float* row = in + (size_t)r * cols;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < cols; j += THREADS) m = fmaxf(m, row[j]);
    m = block_reduce<true>(m, scratch);
    float s = 0.0f;
    for (int j = threadIdx.x; j < cols; j += THREADS) s += expf(row[j] - m);
    s = block_reduce<false>(s, scratch);
    const float inv = 1.0f / s;
    float* dst = out + (size_t)r * cols;
    for (int j = threadIdx.x; j < cols; j += THREADS) dst[j] = expf(row[j] - m) * inv;
}

int main(int argc, char** argv)
{
    ciq::Harness h(argc, argv);
    const int rows = (int)h.size("rows", 32768), cols = (int)h.size("cols", 2048);
    auto in = h.input<float>("in", (size_t)rows * cols);
    auto out = h.output<float>("out", (size_t)rows * cols);
    h.launch([&](cudaStream_t s) {
        softmax_rows<<<rows, THREADS, 0, s>>>(in.device(), out.device(), rows, cols);
    });
    h.reference([&] {
        const std::vector<float>& a = in.host();
        std::vector<float> ref((size_t)rows * cols);
        for (int r = 0; r < rows; ++r) {
            const float* row = &a[(size_t)r * cols];
            double m = -INFINITY, sum = 0.0;
            for (int j = 0; j < cols; ++j) m = std::max(m, (double)row[j]);
            for (int j = 0; j < cols; ++j) sum += std::exp(row[j] - m);
            for (int j = 0; j < cols; ++j) ref[(size_t)r * cols + j] = (float)(std::exp(row[j] - m) / sum);
        }
        return h.compare(out, ref, 1e-4, 1e-9);
    });
    return h.run();
}
