// A register-blocked GEMM tile: each thread keeps an 8 x 8 accumulator tile, a column of A and a
// row of B live across a fully unrolled inner loop. ptxas gives it ~130 registers and no spills
// at its defaults; a low register cap makes it spill heavily.
#ifndef TILE
#define TILE 8
#endif
#define BK 16

extern "C" __global__ void __launch_bounds__(256) tile_gemm(const float* __restrict__ a, const float* __restrict__ b,
                                                            float* __restrict__ c, int n) {
    __shared__ float as[BK][16 * TILE];
    __shared__ float bs[BK][16 * TILE];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int row0 = blockIdx.y * 16 * TILE, col0 = blockIdx.x * 16 * TILE;
    float acc[TILE][TILE] = {};
    for (int k0 = 0; k0 < n; k0 += BK) {
        for (int i = threadIdx.x; i < BK * 16 * TILE; i += 256) {
            const int kk = i / (16 * TILE), rr = i % (16 * TILE);
            as[kk][rr] = a[(row0 + rr) * n + k0 + kk];
            bs[kk][rr] = b[(k0 + kk) * n + col0 + rr];
        }
        __syncthreads();
        #pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float ra[TILE], rb[TILE];
            #pragma unroll
            for (int i = 0; i < TILE; ++i) ra[i] = as[kk][ty * TILE + i];
            #pragma unroll
            for (int j = 0; j < TILE; ++j) rb[j] = bs[kk][tx * TILE + j];
            #pragma unroll
            for (int i = 0; i < TILE; ++i)
                #pragma unroll
                for (int j = 0; j < TILE; ++j) acc[i][j] = fmaf(ra[i], rb[j], acc[i][j]);
        }
        __syncthreads();
    }
    #pragma unroll
    for (int i = 0; i < TILE; ++i)
        #pragma unroll
        for (int j = 0; j < TILE; ++j) c[(row0 + ty * TILE + i) * n + col0 + tx * TILE + j] = acc[i][j];
}
