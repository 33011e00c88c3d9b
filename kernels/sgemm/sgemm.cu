// sgemm — register-blocked single-precision GEMM: C = alpha * A * B + beta * C.
//
// Computes: row-major A (M x K), B (K x N), C (M x N). A 16 x 16 thread block computes a
// BM x BN tile of C with BM = 16 * TM and BN = 16 * TN; each thread keeps a TM x TN
// sub-tile of C in registers and walks K in slices of BK, staging A (transposed) and B
// slices in shared memory. TM and TN are co-tuned with the compiler flags; edges are guarded,
// so any M, N, K work.
// Launch: sgemm<<<dim3(ceil(N / BN), ceil(M / BM)), 256>>>(A, B, C, M, N, K, alpha, beta).
//
// Expected bottleneck: FMA throughput and register pressure: larger TM/TN raise arithmetic
// intensity per shared-memory load but need ~TM*TN + TM + TN registers per thread, which
// lowers occupancy or makes ptxas spill.
#ifndef TM
#define TM 4
#endif
#ifndef TN
#define TN 4
#endif
#ifndef BK
#define BK 8
#endif

#define THREADS_X 16
#define THREADS_Y 16
#define THREADS (THREADS_X * THREADS_Y)
#define BM (THREADS_Y * TM)
#define BN (THREADS_X * TN)

__device__ __forceinline__ void load_tiles(const float* A, const float* B, float (*As)[BM],
                                           float (*Bs)[BN], int M, int N, int K, int row0,
                                           int col0, int k0, int tid)
{
    for (int e = tid; e < BM * BK; e += THREADS) {
        const int r = e / BK, c = e % BK;
        const int gr = row0 + r, gc = k0 + c;
        As[c][r] = (gr < M && gc < K) ? A[(size_t)gr * K + gc] : 0.0f;
    }
    for (int e = tid; e < BK * BN; e += THREADS) {
        const int r = e / BN, c = e % BN;
        const int gr = k0 + r, gc = col0 + c;
        Bs[r][c] = (gr < K && gc < N) ? B[(size_t)gr * N + gc] : 0.0f;
    }
}

__global__ void __launch_bounds__(THREADS)
sgemm(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M,
      int N, int K, float alpha, float beta)
{
    __shared__ float As[BK][BM];
    __shared__ float Bs[BK][BN];
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * THREADS_X + tx;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[TM][TN] = {};
    float a[TM], b[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        load_tiles(A, B, As, Bs, M, N, K, row0, col0, k0, tid);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int m = 0; m < TM; ++m) a[m] = As[k][ty * TM + m];
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[k][tx * TN + j];
#pragma unroll
            for (int m = 0; m < TM; ++m)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[m][j] = fmaf(a[m], b[j], acc[m][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int m = 0; m < TM; ++m) {
        const int r = row0 + ty * TM + m;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int c = col0 + tx * TN + j;
            if (r < M && c < N) {
                float* out = &C[(size_t)r * N + c];
                *out = alpha * acc[m][j] + beta * *out;
            }
        }
    }
}
