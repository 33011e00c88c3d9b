// transpose — tiled matrix transpose through padded shared memory.
//
// Computes: out = in^T for a row-major rows x cols matrix (out is cols x rows). A block of
// TILE x (256 / TILE) threads moves one TILE x TILE tile: coalesced reads of rows of `in`,
// a shared tile padded by one column (no bank conflicts on the transposed read), coalesced
// writes of rows of `out`. Each thread moves TILE * TILE / 256 elements. Edges are guarded.
// Launch: transpose<<<dim3(ceil(cols / TILE), ceil(rows / TILE)), dim3(TILE, 256 / TILE)>>>(
//     in, out, rows, cols).
//
// Expected bottleneck: DRAM bandwidth (pure data movement, no arithmetic); TILE (co-tuned)
// changes the work per thread and the shared-memory footprint.
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
