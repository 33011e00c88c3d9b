// transpose — tiled matrix transpose through padded shared memory.
//
// Computes: out = in^T for a row-major rows x cols matrix (out is cols x rows). A block of
// TILE x (256 / TILE) threads moves one TILE x TILE tile: coalesced reads of rows of `in`,
// a shared tile padded by one column (no bank conflicts on the transposed read), coalesced
// writes of rows of `out`. Each thread moves TILE * TILE / 256 elements. Edges are guarded.
// Launch: transpose<<<dim3(ceil(cols / TILE), ceil(rows / TILE)), dim3(TILE, 256 / TILE)>>>(
//     in, out, rows, cols).
//
// Default problem: rows = cols = 8192 floats (268 MB in, 268 MB out).
// Expected bottleneck: DRAM bandwidth (pure data movement, no arithmetic): 537 MB at 4.8 TB/s is
// a ~0.11 ms floor. TILE (co-tuned) changes the work per thread and the shared-memory footprint.
//
// Reference: the full transpose on the CPU (~0.5 s). Tolerance: none, the comparison is exact
// (rtol = atol = 0): a transpose only moves bits.
#include "compileiq/harness.cuh"  // found through include_dirs in tune.toml

#include <vector>

#ifndef TILE
#define TILE 32
#endif

#define THREADS 256
#define ROWS_PER_PASS (THREADS / TILE)

__global__ void __launch_bounds__(THREADS)
transpose(const float* __restrict__ in, float* __restrict__ out, int rows, int cols)
{
    __shared__ float tile[TILE][TILE + 1];
    const int x = blockIdx.x * TILE + threadIdx.x;
    const int y0 = blockIdx.y * TILE;
#pragma unroll
    for (int dy = threadIdx.y; dy < TILE; dy += ROWS_PER_PASS) {
        const int y = y0 + dy;
        if (x < cols && y < rows) {
            tile[dy][threadIdx.x] = in[(size_t)y * cols + x];
        }
    }
    __syncthreads();
    const int ox = y0 + threadIdx.x;
    const int oy0 = blockIdx.x * TILE;
#pragma unroll
    for (int dy = threadIdx.y; dy < TILE; dy += ROWS_PER_PASS) {
        const int oy = oy0 + dy;
        if (ox < rows && oy < cols) {
            out[(size_t)oy * rows + ox] = tile[threadIdx.x][dy];
        }
    }
}

int main(int argc, char** argv)
{
    ciq::Harness h(argc, argv);
    const int rows = (int)h.size("rows", 8192), cols = (int)h.size("cols", 8192);
    auto in = h.input<float>("in", (size_t)rows * cols);
    auto out = h.output<float>("out", (size_t)rows * cols);
    const dim3 grid((cols + TILE - 1) / TILE, (rows + TILE - 1) / TILE), block(TILE, THREADS / TILE);
    h.launch([&](cudaStream_t s) {
        transpose<<<grid, block, 0, s>>>(in.device(), out.device(), rows, cols);
    });
    h.reference([&] {
        const std::vector<float>& a = in.host();
        std::vector<float> ref((size_t)rows * cols);
        const int B = 64;  // cache-blocked
        for (int r0 = 0; r0 < rows; r0 += B)
            for (int c0 = 0; c0 < cols; c0 += B)
                for (int r = r0; r < std::min(r0 + B, rows); ++r)
                    for (int c = c0; c < std::min(c0 + B, cols); ++c)
                        ref[(size_t)c * rows + r] = a[(size_t)r * cols + c];
        return h.compare(out, ref, 0.0, 0.0);
    });
    return h.run();
}
