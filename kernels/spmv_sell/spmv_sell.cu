// spmv_sell — sparse matrix times vector, y = A x, with A in SELL-C-sigma (sliced ELLPACK).
//
// Computes: A is n x n with a skewed number of nonzeros per row (4 + an exponential tail,
// mean ~24, at most 256; 3/4 of the columns within +-4096 of the diagonal, 1/4 anywhere). The
// host builds the SELL-C-sigma structure (Kreutzer et al. 2014): rows are sorted by length,
// longest first, within windows of sigma rows (perm[p] = the original row at sorted position p);
// each slice of C = 32 consecutive sorted rows is padded to its longest row and stored
// column-major (entry j of the slice's row `lane` at slice_ptr[s] + j * C + lane; padding has
// value 0 and column 0), so the 32 lanes of a warp read 32 consecutive values and columns.
// One thread per sorted row; it loops over its slice's width and writes y[perm[p]].
// Launch: spmv_sell<<<ceil(n / BLOCK), BLOCK>>>(slice_ptr, slice_len, col, val, perm, x, y, n).
//
// Default problem: n = 2^22 rows, ~100 M nonzeros (~105 M stored with padding, sigma = 1024).
// Expected bottleneck: DRAM bandwidth. Each stored entry moves 8 bytes (value + column): ~840
// MB, plus x (16.8 MB, mostly L2-resident: the gathers x[col] are the irregular part), y and
// perm (16.8 MB each) -> ~0.89 GB, a ~0.19 ms floor at 4.8 TB/s; 2 FLOP per 8 bytes. BLOCK
// (co-tuned) only changes the thread-block granularity (the slice height is fixed at 32).
//
// Reference: the full CPU SpMV (in double, ~0.5 s). Tolerance: rtol 1e-5, atol 1e-5 — a row
// sums at most 256 fp32 products of values in [-1, 1) in the same order as the CPU.
#include "compileiq/harness.cuh"  // found through include_dirs in tune.toml

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#ifndef BLOCK
#define BLOCK 256
#endif

#define SELL_C 32

__global__ void __launch_bounds__(BLOCK)
spmv_sell(const int* __restrict__ slice_ptr, const int* __restrict__ slice_len,
          const int* __restrict__ col, const float* __restrict__ val, const int* __restrict__ perm,
          const float* __restrict__ x, float* __restrict__ y, int n)
{
    const int p = blockIdx.x * BLOCK + threadIdx.x;
    if (p >= n) return;
    const int s = p / SELL_C;
    const int len = slice_len[s];
    size_t at = (size_t)slice_ptr[s] + p % SELL_C;
    float sum = 0.0f;
    for (int j = 0; j < len; ++j, at += SELL_C) sum = fmaf(val[at], x[col[at]], sum);
    y[perm[p]] = sum;
}

// The SELL-C-sigma structure, built on the host.
struct Sell {
    std::vector<int> slice_ptr, slice_len, col, perm, row_len;
    std::vector<float> val;
};

static Sell build_sell(int n, int sigma, uint32_t seed)
{
    std::mt19937 rng(seed);
    auto uniform = [&] { return (rng() >> 8) * (1.0f / 16777216.0f); };  // [0, 1)
    Sell a;
    a.row_len.resize(n);
    for (int r = 0; r < n; ++r) {
        const double tail = -std::log(1.0 - uniform()) * 20.0;  // exponential, mean 20
        a.row_len[r] = std::min(4 + (int)tail, 256);
    }
    a.perm.resize(n);
    for (int r = 0; r < n; ++r) a.perm[r] = r;
    for (int w = 0; w < n; w += sigma) {  // sort by length (longest first) within each window
        std::stable_sort(a.perm.begin() + w, a.perm.begin() + std::min(w + sigma, n),
                         [&](int i, int j) { return a.row_len[i] > a.row_len[j]; });
    }
    const int slices = (n + SELL_C - 1) / SELL_C;
    a.slice_ptr.assign(slices + 1, 0);
    a.slice_len.assign(slices, 0);
    for (int s = 0; s < slices; ++s) {
        for (int p = s * SELL_C; p < std::min((s + 1) * SELL_C, n); ++p) {
            a.slice_len[s] = std::max(a.slice_len[s], a.row_len[a.perm[p]]);
        }
        a.slice_ptr[s + 1] = a.slice_ptr[s] + a.slice_len[s] * SELL_C;
    }
    a.col.assign(a.slice_ptr[slices], 0);
    a.val.assign(a.slice_ptr[slices], 0.0f);
    for (int p = 0; p < n; ++p) {
        const int row = a.perm[p], s = p / SELL_C;
        size_t at = (size_t)a.slice_ptr[s] + p % SELL_C;
        for (int j = 0; j < a.row_len[row]; ++j, at += SELL_C) {
            const bool local = (rng() & 3) != 0;
            int c = local ? row + (int)(rng() % 8193) - 4096 : (int)(rng() % (uint32_t)n);
            a.col[at] = std::min(std::max(c, 0), n - 1);
            a.val[at] = 2.0f * uniform() - 1.0f;
        }
    }
    return a;
}

int main(int argc, char** argv)
{
    ciq::Harness h(argc, argv);
    const int n = (int)h.size("n", 1 << 22), sigma = (int)h.size("sigma", 1024);
    if (n < 1 || sigma < 1) {
        std::fprintf(stderr, "spmv_sell: n and sigma must be positive\n");
        return 2;
    }
    const Sell a = build_sell(n, sigma, 0x5e11u + h.options().seed);
    auto slice_ptr = h.input_host<int32_t>("slice_ptr", a.slice_ptr);
    auto slice_len = h.input_host<int32_t>("slice_len", a.slice_len);
    auto col = h.input_host<int32_t>("col", a.col);
    auto val = h.input_host<float>("val", a.val);
    auto perm = h.input_host<int32_t>("perm", a.perm);
    auto x = h.input<float>("x", n);
    auto y = h.output<float>("y", n);
    h.launch([&](cudaStream_t s) {
        spmv_sell<<<(n + BLOCK - 1) / BLOCK, BLOCK, 0, s>>>(
            slice_ptr.device(), slice_len.device(), col.device(), val.device(), perm.device(),
            x.device(), y.device(), n);
    });
    h.reference([&] {
        const std::vector<float>& hx = x.host();
        std::vector<float> ref(n);
        for (int p = 0; p < n; ++p) {
            const int row = a.perm[p], s = p / SELL_C;
            size_t at = (size_t)a.slice_ptr[s] + p % SELL_C;
            double sum = 0.0;
            for (int j = 0; j < a.row_len[row]; ++j, at += SELL_C) sum += (double)a.val[at] * hx[a.col[at]];
            ref[row] = (float)sum;
        }
        return h.compare(y, ref, 1e-5, 1e-5);
    });
    return h.run();
}
