// sgemm — register-blocked single-precision GEMM: C = alpha * A * B + beta * C.
//
// Computes: row-major A (M x K), B (K x N), C (M x N). A 16 x 16 thread block computes a
// BM x BN tile of C with BM = 16 * TM and BN = 16 * TN; each thread keeps a TM x TN
// sub-tile of C in registers and walks K in slices of BK, staging A (transposed) and B
// slices in shared memory. TM and TN are co-tuned with the compiler flags; edges are guarded,
// so any M, N, K work.
// Launch: sgemm<<<dim3(ceil(N / BN), ceil(M / BM)), 256>>>(A, B, C, M, N, K, alpha, beta).
//
// With beta == 0 (as the harness runs it: C is an output, poisoned before each launch) C is
// not read, as in BLAS.
//
// Default problem: M = N = K = 4096, alpha = 1, beta = 0.
// Expected bottleneck: FMA throughput and register pressure: 2 * M * N * K = 137.4 GFLOP, a
// ~2.05 ms floor at ~67 TFLOP/s fp32 (132 SMs x 128 FMA/clk x 2 x 1.98 GHz); DRAM is only
// 3 x 67 MB. Larger TM/TN raise arithmetic intensity per shared-memory load but need
// ~TM*TN + TM + TN registers per thread, which lowers occupancy or makes ptxas spill.
//
// Reference: the full CPU product (137 GFLOP) would take minutes, so --check recomputes 33
// full rows of C (every M/32-th and the last), in double. Tolerance: rtol 1e-4, atol 2e-3 —
// each output is a 4096-term fp32 dot product of values in [-1, 1) (|C| ~ 21).
#include "compileiq/harness.cuh"  // found through include_dirs in tune.toml

#include <vector>

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
                // BLAS semantics: with beta == 0, C is not read (it may hold anything, NaN too).
                *out = beta == 0.0f ? alpha * acc[m][j] : alpha * acc[m][j] + beta * *out;
            }
        }
    }
}

int main(int argc, char** argv)
{
    ciq::Harness h(argc, argv);
    const int M = (int)h.size("m", 4096), N = (int)h.size("n", 4096), K = (int)h.size("k", 4096);
    const float alpha = (float)h.real("alpha", 1.0);
    auto A = h.input<float>("A", (size_t)M * K);
    auto B = h.input<float>("B", (size_t)K * N);
    auto C = h.output<float>("C", (size_t)M * N);
    const dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM), block(THREADS_X, THREADS_Y);
    h.launch([&](cudaStream_t s) {
        sgemm<<<grid, block, 0, s>>>(A.device(), B.device(), C.device(), M, N, K, alpha, 0.0f);
    });
    h.reference([&] {
        // Subset check (see the header comment); the harness itself checks that every element
        // of C was written.
        const std::vector<float>&ha = A.host(), &hb = B.host();
        const std::vector<float> got = C.fetch();
        std::vector<float> sub_got, sub_ref;
        std::vector<double> row(N);
        std::vector<int> rows;
        for (int r = 0; r < M; r += M / 32 > 0 ? M / 32 : 1) rows.push_back(r);
        if (rows.back() != M - 1) rows.push_back(M - 1);
        for (int r : rows) {
            std::fill(row.begin(), row.end(), 0.0);
            for (int k = 0; k < K; ++k) {
                const double a = ha[(size_t)r * K + k];
                const float* b = &hb[(size_t)k * N];
                for (int c = 0; c < N; ++c) row[c] += a * b[c];
            }
            for (int c = 0; c < N; ++c) {
                sub_got.push_back(got[(size_t)r * N + c]);
                sub_ref.push_back((float)(alpha * row[c]));
            }
        }
        return h.compare(sub_got, sub_ref, 1e-4, 2e-3);
    });
    return h.run();
}
