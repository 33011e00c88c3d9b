// bsr_spmm — block-sparse (BSR) matrix times dense matrix: C = A * B.
//
// Computes: A is M x K in block-sparse-row format with dense BS x BS blocks (BS = 32):
// row_ptr[Mb + 1] (Mb = M / BS) indexes col_idx[nnzb] (block columns, sorted and distinct per
// block row) and values[nnzb][BS][BS] (each block row-major). B is K x N and C is M x N, both
// dense row-major fp32. One thread block computes a BS x BN tile of C for one block row: for
// each nonzero block it stages the A block and the matching BS x BN slice of B in shared
// memory, then each of its 256 threads (32 x 8) accumulates 4 x BN/32 outputs (rows ty + 8i,
// columns tx + 32j: broadcast reads of A, conflict-free reads of B, coalesced stores of C).
// Empty block rows write zeros.
// Launch: bsr_spmm<<<dim3(ceil(N / BN), Mb), 256>>>(row_ptr, col_idx, values, B, C, Mb, N).
//
// Default problem: M = K = 16384 (512 x 512 blocks of 32 x 32), N = 1024, each block row holds
// 4..36 nonzero blocks at random block columns (~20 on average, ~3.9% of the blocks):
// nnzb ~ 10240, 10.5 M stored values (42 MB).
// Expected bottleneck: on paper FP32 FMA: 2 * nnzb * BS*BS * N ~ 21.5 GFLOP, a ~0.32 ms floor
// at ~67 TFLOP/s; DRAM is 42 MB (A) + 67 MB (B) + 67 MB (C) ~ 176 MB, 0.04 ms at 4.8 TB/s. In
// practice the random block columns make it L2/latency-bound: every nonzero block re-reads a
// BS x BN slice of B (12.8 FLOP per byte moved into shared memory at BN = 128), with no
// software pipelining and uneven block-row lengths. BN (co-tuned) trades reuse of each A
// block against shared memory and registers.
//
// Reference: the full CPU product (21.5 GFLOP) would take ~20 s, so --check recomputes 33
// block rows (every Mb/32-th and the last), in double. Tolerance: rtol 1e-4, atol 1e-3 — each
// output is a ~640-term fp32 dot product of values in [-1, 1) (|C| ~ 8).
#include "compileiq/harness.cuh"  // found through include_dirs in tune.toml

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#ifndef BN
#define BN 128
#endif

#define BS 32
#define THREADS 256
#define ROWS_PER_PASS (THREADS / 32)     // 8
#define RT (BS / ROWS_PER_PASS)          // rows per thread: 4
#define CT (BN / 32)                     // columns per thread

__global__ void __launch_bounds__(THREADS)
bsr_spmm(const int* __restrict__ row_ptr, const int* __restrict__ col_idx,
         const float* __restrict__ values, const float* __restrict__ B, float* __restrict__ C,
         int Mb, int N)
{
    __shared__ float As[BS][BS];
    __shared__ float Bs[BS][BN];
    const int tid = threadIdx.x, tx = tid % 32, ty = tid / 32;
    const int br = blockIdx.y, n0 = blockIdx.x * BN;
    float acc[RT][CT] = {};
    const int begin = row_ptr[br], end = row_ptr[br + 1];
    for (int b = begin; b < end; ++b) {
        const float* a = values + (size_t)b * BS * BS;
        for (int e = tid; e < BS * BS; e += THREADS) As[e / BS][e % BS] = a[e];
        const float* brow = B + (size_t)col_idx[b] * BS * N;
        for (int e = tid; e < BS * BN; e += THREADS) {
            const int r = e / BN, c = e % BN;
            Bs[r][c] = n0 + c < N ? brow[(size_t)r * N + n0 + c] : 0.0f;
        }
        __syncthreads();
#pragma unroll 8
        for (int k = 0; k < BS; ++k) {
            float av[RT], bv[CT];
#pragma unroll
            for (int i = 0; i < RT; ++i) av[i] = As[ty + ROWS_PER_PASS * i][k];
#pragma unroll
            for (int j = 0; j < CT; ++j) bv[j] = Bs[k][tx + 32 * j];
#pragma unroll
            for (int i = 0; i < RT; ++i)
#pragma unroll
                for (int j = 0; j < CT; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < RT; ++i) {
        float* crow = C + (size_t)(br * BS + ty + ROWS_PER_PASS * i) * N;
#pragma unroll
        for (int j = 0; j < CT; ++j) {
            const int c = n0 + tx + 32 * j;
            if (c < N) crow[c] = acc[i][j];
        }
    }
}

int main(int argc, char** argv)
{
    ciq::Harness h(argc, argv);
    const int Mb = h.size("mb", 512), Kb = h.size("kb", 512), N = h.size("n", 1024);
    const int min_nz = std::min((int)h.size("min_blocks", 4), Kb);
    const int max_nz = std::min((int)h.size("max_blocks", 36), Kb);
    // The sparsity pattern: random block columns, sorted and distinct within each block row.
    std::mt19937 rng(20240611u + h.options().seed);
    std::vector<int> row_ptr(Mb + 1, 0), col_idx, all(Kb);
    for (int c = 0; c < Kb; ++c) all[c] = c;
    for (int r = 0; r < Mb; ++r) {
        const int count = std::uniform_int_distribution<int>(min_nz, max_nz)(rng);
        for (int i = 0; i < count; ++i) {  // partial Fisher-Yates: `count` distinct columns
            std::swap(all[i], all[std::uniform_int_distribution<int>(i, Kb - 1)(rng)]);
        }
        std::sort(all.begin(), all.begin() + count);
        col_idx.insert(col_idx.end(), all.begin(), all.begin() + count);
        row_ptr[r + 1] = (int)col_idx.size();
    }
    const size_t nnzb = col_idx.size();
    auto d_row_ptr = h.input_host<int32_t>("row_ptr", row_ptr);
    auto d_col_idx = h.input_host<int32_t>("col_idx", col_idx);
    auto values = h.input<float>("values", nnzb * BS * BS);
    auto B = h.input<float>("B", (size_t)Kb * BS * N);
    auto C = h.output<float>("C", (size_t)Mb * BS * N);
    const dim3 grid((N + BN - 1) / BN, Mb);
    h.launch([&](cudaStream_t s) {
        bsr_spmm<<<grid, THREADS, 0, s>>>(d_row_ptr.device(), d_col_idx.device(),
                                          values.device(), B.device(), C.device(), Mb, N);
    });
    h.reference([&] {
        // Subset check (see the header comment); the harness itself checks that every element
        // of C was written.
        const std::vector<float>& hv = values.host();
        const std::vector<float>& hb = B.host();
        const std::vector<float> got = C.fetch();
        std::vector<float> sub_got, sub_ref;
        std::vector<double> acc((size_t)BS * N);
        std::vector<int> rows;
        for (int br = 0; br < Mb; br += std::max(1, Mb / 32)) rows.push_back(br);
        if (rows.back() != Mb - 1) rows.push_back(Mb - 1);
        for (int br : rows) {
            std::fill(acc.begin(), acc.end(), 0.0);
            for (int b = row_ptr[br]; b < row_ptr[br + 1]; ++b) {
                const float* a = &hv[(size_t)b * BS * BS];
                for (int r = 0; r < BS; ++r) {
                    double* out = &acc[(size_t)r * N];
                    for (int k = 0; k < BS; ++k) {
                        const double av = a[r * BS + k];
                        const float* brow = &hb[((size_t)col_idx[b] * BS + k) * N];
                        for (int n = 0; n < N; ++n) out[n] += av * brow[n];
                    }
                }
            }
            for (size_t i = 0; i < acc.size(); ++i) {
                sub_got.push_back(got[(size_t)br * BS * N + i]);
                sub_ref.push_back((float)acc[i]);
            }
        }
        return h.compare(sub_got, sub_ref, 1e-4, 1e-3);
    });
    return h.run();
}
