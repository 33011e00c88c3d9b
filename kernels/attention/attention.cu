// attention — flash-style attention forward, fp32, head dimension 64, no mask.
//
// Computes: for each head h and query row q, O[h][q] = softmax(Q[h][q] . K[h]^T / sqrt(D)) V[h],
// with Q, K, V, O stored [heads][L][D] row-major (D = 64). One thread block owns BQ query rows
// of one head: it stages its Q tile in shared memory (pre-scaled by log2(e)/sqrt(D), so the
// softmax uses exp2f), then walks the keys in tiles of BKV rows of K and V (also in shared
// memory). Per tile it computes the BQ x BKV scores, updates each row's running max m and sum l
// (online softmax: earlier partial sums and outputs are rescaled by exp2(m_old - m_new)), writes
// the probabilities P to shared memory and accumulates O += P V in registers. The 256 threads
// form 16 x 16: thread (ty, tx) owns query rows ty + 16i, score columns tx + 16j and output
// dims tx + 16j, so a row's max and sum are reduced by shuffles within 16 lanes. Shared tiles
// are padded by one float per row (conflict-free reads). The full L x L score matrix is never
// stored. Division by l happens once, at the end.
// Launch: attention_fwd<<<dim3(ceil(L / BQ), heads), 256>>>(Q, K, V, O, L, log2(e)/sqrt(D)).
//
// Default problem: heads = 64 (e.g. batch 8 x 8 heads), L = 2048, D = 64.
// Expected bottleneck: FP32 FMA throughput (no tensor cores): 4 * heads * L^2 * D = 68.7 GFLOP
// (QK^T and PV), a ~1.0 ms floor at ~67 TFLOP/s, plus heads * L^2 = 268 M exp2f on the SFUs
// (~0.06 ms at 16/clk/SM). DRAM is small: 4 x 33.5 MB = 134 MB (K and V are re-read by each of
// the L / BQ query tiles, from L2). BQ and BKV (co-tuned) trade K/V reuse and shared memory
// (41.6 KB at BQ = 64, BKV = 32; the static limit is 48 KB) against registers and occupancy.
//
// Reference: the full CPU reference (68.7 GFLOP) would take over a minute, so --check
// recomputes ~1100 query rows (every 16th row, plus the last, of every 8th head and the last),
// in double. Q is drawn from [-2, 2) (K, V from [-1, 1)) so the softmax is not flat. Fast math
// is allowed (tune.toml): tolerance rtol 1e-4, atol 2e-5 covers ex2.approx and the fp32
// sums over 2048 keys (|O| ~ 0.05..0.5).
#include "compileiq/harness.cuh"  // found through include_dirs in tune.toml

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#ifndef BQ
#define BQ 64
#endif
#ifndef BKV
#define BKV 32
#endif

#define D 64
#define THREADS 256
#define LANES 16                 // threads sharing a query row
#define RQ (BQ / 16)             // query rows per thread
#define RK (BKV / LANES)         // score columns per thread
#define RD (D / LANES)           // output dims per thread

__device__ __forceinline__ float row_max(float v)
{
#pragma unroll
    for (int offset = LANES / 2; offset > 0; offset >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    }
    return v;
}

__device__ __forceinline__ float row_sum(float v)
{
#pragma unroll
    for (int offset = LANES / 2; offset > 0; offset >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, offset);
    }
    return v;
}

__global__ void __launch_bounds__(THREADS)
attention_fwd(const float* __restrict__ Q, const float* __restrict__ K,
              const float* __restrict__ V, float* __restrict__ O, int L, float qscale)
{
    __shared__ float Qs[BQ][D + 1];
    __shared__ float Ks[BKV][D + 1];
    __shared__ float Vs[BKV][D];
    __shared__ float Ps[BQ][BKV + 1];
    const int tid = threadIdx.x, tx = tid % LANES, ty = tid / LANES;
    const int q0 = blockIdx.x * BQ;
    const size_t head = (size_t)blockIdx.y * L * D;
    for (int e = tid; e < BQ * D; e += THREADS) {
        const int r = e / D, d = e % D;
        Qs[r][d] = q0 + r < L ? Q[head + (size_t)(q0 + r) * D + d] * qscale : 0.0f;
    }
    float m[RQ], l[RQ], o[RQ][RD];
#pragma unroll
    for (int i = 0; i < RQ; ++i) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int j = 0; j < RD; ++j) o[i][j] = 0.0f;
    }
    for (int k0 = 0; k0 < L; k0 += BKV) {
        __syncthreads();  // the previous tile's Ks/Vs/Ps are consumed (and Qs is complete)
        for (int e = tid; e < BKV * D; e += THREADS) {
            const int r = e / D, d = e % D;
            const bool ok = k0 + r < L;
            const size_t at = head + (size_t)(k0 + r) * D + d;
            Ks[r][d] = ok ? K[at] : 0.0f;
            Vs[r][d] = ok ? V[at] : 0.0f;
        }
        __syncthreads();
        float s[RQ][RK];
#pragma unroll
        for (int i = 0; i < RQ; ++i)
#pragma unroll
            for (int j = 0; j < RK; ++j) s[i][j] = 0.0f;
#pragma unroll 16
        for (int d = 0; d < D; ++d) {
            float a[RQ], b[RK];
#pragma unroll
            for (int i = 0; i < RQ; ++i) a[i] = Qs[ty + 16 * i][d];
#pragma unroll
            for (int j = 0; j < RK; ++j) b[j] = Ks[tx + LANES * j][d];
#pragma unroll
            for (int i = 0; i < RQ; ++i)
#pragma unroll
                for (int j = 0; j < RK; ++j) s[i][j] = fmaf(a[i], b[j], s[i][j]);
        }
#pragma unroll
        for (int i = 0; i < RQ; ++i) {
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < RK; ++j) {
                if (k0 + tx + LANES * j >= L) s[i][j] = -INFINITY;  // keys past the end
                mx = fmaxf(mx, s[i][j]);
            }
            const float m_new = fmaxf(m[i], row_max(mx));  // finite: key k0 always exists
            const float corr = exp2f(m[i] - m_new);        // 0 on the first tile
            float sum = 0.0f;
#pragma unroll
            for (int j = 0; j < RK; ++j) {
                const float p = exp2f(s[i][j] - m_new);
                Ps[ty + 16 * i][tx + LANES * j] = p;
                sum += p;
            }
            l[i] = l[i] * corr + row_sum(sum);
            m[i] = m_new;
#pragma unroll
            for (int j = 0; j < RD; ++j) o[i][j] *= corr;
        }
        __syncthreads();
#pragma unroll 8
        for (int c = 0; c < BKV; ++c) {
            float p[RQ], v[RD];
#pragma unroll
            for (int i = 0; i < RQ; ++i) p[i] = Ps[ty + 16 * i][c];
#pragma unroll
            for (int j = 0; j < RD; ++j) v[j] = Vs[c][tx + LANES * j];
#pragma unroll
            for (int i = 0; i < RQ; ++i)
#pragma unroll
                for (int j = 0; j < RD; ++j) o[i][j] = fmaf(p[i], v[j], o[i][j]);
        }
    }
#pragma unroll
    for (int i = 0; i < RQ; ++i) {
        const int q = q0 + ty + 16 * i;
        if (q >= L) continue;
        const float inv = 1.0f / l[i];
#pragma unroll
        for (int j = 0; j < RD; ++j) O[head + (size_t)q * D + tx + LANES * j] = o[i][j] * inv;
    }
}

int main(int argc, char** argv)
{
    ciq::Harness h(argc, argv);
    const int heads = (int)h.size("heads", 64), L = (int)h.size("l", 2048);
    const size_t count = (size_t)heads * L * D;
    auto Q = h.input<float>("Q", count, [](std::mt19937& g, size_t) {
        return std::uniform_real_distribution<float>(-2.0f, 2.0f)(g);
    });
    auto K = h.input<float>("K", count);
    auto V = h.input<float>("V", count);
    auto O = h.output<float>("O", count);
    const float qscale = (float)(1.4426950408889634 / std::sqrt((double)D));
    const dim3 grid((L + BQ - 1) / BQ, heads);
    h.launch([&](cudaStream_t s) {
        attention_fwd<<<grid, THREADS, 0, s>>>(Q.device(), K.device(), V.device(), O.device(), L,
                                               qscale);
    });
    h.reference([&] {
        // Subset check (see the header comment); the harness itself checks that every element
        // of O was written.
        const std::vector<float>&hq = Q.host(), &hk = K.host(), &hv = V.host();
        const std::vector<float> got = O.fetch();
        std::vector<float> sub_got, sub_ref;
        std::vector<double> score(L), out(D);
        std::vector<int> sample_heads, sample_rows;
        for (int hh = 0; hh < heads; hh += 8) sample_heads.push_back(hh);
        if (sample_heads.back() != heads - 1) sample_heads.push_back(heads - 1);
        for (int q = 0; q < L; q += 16) sample_rows.push_back(q);
        if (sample_rows.back() != L - 1) sample_rows.push_back(L - 1);
        const double scale = 1.0 / std::sqrt((double)D);
        for (int hh : sample_heads) {
            const size_t base = (size_t)hh * L * D;
            for (int q : sample_rows) {
                const float* qr = &hq[base + (size_t)q * D];
                double mx = -INFINITY, sum = 0.0;
                for (int k = 0; k < L; ++k) {
                    const float* kr = &hk[base + (size_t)k * D];
                    double dot = 0.0;
                    for (int d = 0; d < D; ++d) dot += (double)qr[d] * kr[d];
                    score[k] = dot * scale;
                    mx = std::max(mx, score[k]);
                }
                std::fill(out.begin(), out.end(), 0.0);
                for (int k = 0; k < L; ++k) {
                    const double p = std::exp(score[k] - mx);
                    sum += p;
                    const float* vr = &hv[base + (size_t)k * D];
                    for (int d = 0; d < D; ++d) out[d] += p * vr[d];
                }
                for (int d = 0; d < D; ++d) {
                    sub_got.push_back(got[base + (size_t)q * D + d]);
                    sub_ref.push_back((float)(out[d] / sum));
                }
            }
        }
        return h.compare(sub_got, sub_ref, 1e-4, 2e-5);
    });
    return h.run();
}
