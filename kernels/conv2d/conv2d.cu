// conv2d — 3x3, stride-1, pad-1 2-D convolution as an implicit GEMM (NHWC activations).
//
// Computes: y[n][h][w][k] = sum_{r,s,c} x[n][h+r-1][w+s-1][c] * wt[k][r][s][c] (zero padding),
// with x in NHWC, wt in KRSC and y in NHWK, all fp32. Read as a GEMM: M = N*H*W output
// pixels, N_gemm = K output channels, K_gemm = 9*C; the A operand (the im2col matrix) is never
// materialised — each K_gemm slice of BK channels at one (r, s) tap is gathered straight from
// x into shared memory (hence C % BK == 0: a slice never straddles two taps). A 16 x 16 thread
// block computes a BM x BN = 16TT x 16TT tile of y; each thread owns TT x TT outputs interleaved by
// 16 (rows ty + 16i, columns tx + 16j), so shared-memory reads are conflict-free and the stores
// of y are coalesced. The tiles in shared memory are padded by 4 floats per row.
// Launch: conv2d_nhwc<<<dim3(ceil(K / BN), ceil(N*H*W / BM)), 256>>>(x, wt, y, N, H, W, C, K).
//
// Default problem (a ResNet-style layer, batch 32): N = 32, H = W = 56, C = K = 256.
// Expected bottleneck: FP32 FMA throughput. 2 * N*H*W * K * 9*C = 118.4 GFLOP; an H200 does
// ~67 TFLOP/s fp32 (132 SMs x 128 FMA/clk x 2 x 1.98 GHz), so the floor is ~1.8 ms. Memory is
// small: x 103 MB + wt 2.4 MB + y 103 MB = 208 MB, 0.04 ms at 4.8 TB/s. TT (thread tile,
// co-tuned) trades registers (TT*TT accumulators) for fewer shared loads per FMA; BK trades
// shared memory and barrier count.
//
// Reference: the full CPU reference (118 GFLOP) would take minutes, so --check recomputes all K
// channels of a sample of ~600 output pixels (a strided sample plus image corners and edges,
// where the zero padding acts), in double. Tolerance: rtol 1e-4, atol 2e-3 — each output is a
// 2304-term fp32 dot product of values in [-1, 1) (|y| ~ 16; accumulated rounding ~1e-4).
#include "compileiq/harness.cuh"  // found through include_dirs in tune.toml

#include <cstdio>
#include <vector>

#ifndef TT
#define TT 8
#endif
#ifndef BK
#define BK 16
#endif

#define TX 16
#define TY 16
#define THREADS (TX * TY)
#define BM (TY * TT)
#define BN (TX * TT)
#define PAD 4

__global__ void __launch_bounds__(THREADS)
conv2d_nhwc(const float* __restrict__ x, const float* __restrict__ wt, float* __restrict__ y,
            int N, int H, int W, int C, int K)
{
    __shared__ float As[BK][BM + PAD];
    __shared__ float Bs[BK][BN + PAD];
    const int tid = threadIdx.x, tx = tid % TX, ty = tid / TX;
    const int HW = H * W, M = N * HW, KG = 9 * C;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[TT][TT] = {};
    for (int k0 = 0; k0 < KG; k0 += BK) {
        const int rs = k0 / C, c0 = k0 - rs * C;
        const int dr = rs / 3 - 1, ds = rs % 3 - 1;
        for (int e = tid; e < BM * BK; e += THREADS) {
            const int mi = e / BK, ci = e % BK, m = row0 + mi;
            float v = 0.0f;
            if (m < M) {
                const int n = m / HW, hw = m - n * HW;
                const int h = hw / W + dr, w = hw % W + ds;
                if (h >= 0 && h < H && w >= 0 && w < W) {
                    v = x[((size_t)(n * H + h) * W + w) * C + c0 + ci];
                }
            }
            As[ci][mi] = v;
        }
        for (int e = tid; e < BN * BK; e += THREADS) {
            const int ni = e / BK, ci = e % BK, k = col0 + ni;
            Bs[ci][ni] = k < K ? wt[(size_t)k * KG + k0 + ci] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float a[TT], b[TT];
#pragma unroll
            for (int i = 0; i < TT; ++i) a[i] = As[kk][ty + TY * i];
#pragma unroll
            for (int j = 0; j < TT; ++j) b[j] = Bs[kk][tx + TX * j];
#pragma unroll
            for (int i = 0; i < TT; ++i)
#pragma unroll
                for (int j = 0; j < TT; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TT; ++i) {
        const int m = row0 + ty + TY * i;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < TT; ++j) {
            const int k = col0 + tx + TX * j;
            if (k < K) y[(size_t)m * K + k] = acc[i][j];
        }
    }
}

// Output pixels checked by --check: a strided sample plus each sampled image's corners/edges.
static std::vector<int> sample_pixels(int N, int H, int W)
{
    const int HW = H * W, M = N * HW;
    std::vector<int> out;
    const int step = M / 512 > 1 ? M / 512 + 1 : 1;  // +1: not a multiple of W, walks columns
    for (int m = 0; m < M; m += step) out.push_back(m);
    for (int n : {0, N - 1}) {
        for (int hw : {0, W - 1, HW - W, HW - 1, W / 2, (H / 2) * W, (H / 2) * W + W - 1}) {
            if (hw >= 0 && hw < HW) out.push_back(n * HW + hw);
        }
    }
    return out;
}

int main(int argc, char** argv)
{
    ciq::Harness h(argc, argv);
    const int N = (int)h.size("n", 32), H = (int)h.size("h", 56), W = (int)h.size("w", 56);
    const int C = (int)h.size("c", 256), K = (int)h.size("k", 256);
    if (C % BK != 0) {
        std::fprintf(stderr, "conv2d: C = %d must be a multiple of BK = %d\n", C, BK);
        return 2;
    }
    const int M = N * H * W;
    auto x = h.input<float>("x", (size_t)M * C);
    auto wt = h.input<float>("wt", (size_t)K * 9 * C);
    auto y = h.output<float>("y", (size_t)M * K);
    const dim3 grid((K + BN - 1) / BN, (M + BM - 1) / BM);
    h.launch([&](cudaStream_t s) {
        conv2d_nhwc<<<grid, THREADS, 0, s>>>(x.device(), wt.device(), y.device(), N, H, W, C, K);
    });
    h.reference([&] {
        // Subset check (see the header comment); the harness itself checks that every element
        // of y was written.
        const std::vector<float>& hx = x.host();
        const std::vector<float>& hw = wt.host();
        const std::vector<float> got = y.fetch();
        std::vector<float> sub_got, sub_ref;
        std::vector<double> row(K);
        for (int m : sample_pixels(N, H, W)) {
            const int n = m / (H * W), p = m % (H * W), oh = p / W, ow = p % W;
            for (int k = 0; k < K; ++k) row[k] = 0.0;
            for (int r = 0; r < 3; ++r) {
                for (int s = 0; s < 3; ++s) {
                    const int ih = oh + r - 1, iw = ow + s - 1;
                    if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                    const float* xp = &hx[((size_t)(n * H + ih) * W + iw) * C];
                    for (int k = 0; k < K; ++k) {
                        const float* wp = &hw[((size_t)k * 9 + r * 3 + s) * C];
                        double acc = 0.0;
                        for (int c = 0; c < C; ++c) acc += (double)xp[c] * wp[c];
                        row[k] += acc;
                    }
                }
            }
            for (int k = 0; k < K; ++k) {
                sub_got.push_back(got[(size_t)m * K + k]);
                sub_ref.push_back((float)row[k]);
            }
        }
        return h.compare(sub_got, sub_ref, 1e-4, 2e-3);
    });
    return h.run();
}
