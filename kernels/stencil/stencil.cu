// stencil — 3-D 7-point Jacobi stencil with 2.5-D blocking.
//
// Computes: out[z][y][x] = c0 * in[z][y][x] + c1 * (sum of the 6 face neighbours) for the
// interior of an nx x ny x nz grid (x fastest); boundary points are copied unchanged. A
// 32 x 8 block owns a column of the grid and marches in z, keeping the z-1 / z / z+1 values
// in registers and the current xy-plane (with a one-point halo) in shared memory.
// Launch: stencil7<<<dim3(ceil(nx / 32), ceil(ny / 8)), dim3(32, 8)>>>(in, out, nx, ny, nz,
//     c0, c1).
//
// Default problem: nx = ny = 512, nz = 256 floats (268 MB in, 268 MB out); the grid is
// 16 x 64 = 1024 blocks of 256 threads, about one wave on 132 SMs.
// Expected bottleneck: DRAM bandwidth (each point is read about once and written once,
// 8 FLOPs per 8 bytes): 537 MB at 4.8 TB/s is a ~0.11 ms floor; the shared-memory halo and
// the z-march add latency that more independent loads (and fewer registers) can hide.
//
// Reference: the full stencil in double on the CPU (~0.5 s). Tolerance: rtol 1e-5, atol 1e-6
// (c0 = 0.4, c1 = 0.1, inputs in [-1, 1): outputs below 1 in magnitude, a few fp32 roundings).
#include "compileiq/harness.cuh"  // found through include_dirs in tune.toml

#include <vector>

#define BX 32
#define BY 8

extern "C" __global__ void __launch_bounds__(BX * BY)
stencil7(const float* __restrict__ in, float* __restrict__ out, int nx, int ny, int nz, float c0,
         float c1)
{
    __shared__ float plane[BY + 2][BX + 2];
    const int x = blockIdx.x * BX + threadIdx.x, y = blockIdx.y * BY + threadIdx.y;
    const int sx = threadIdx.x + 1, sy = threadIdx.y + 1;
    const bool inside = x < nx && y < ny;
    const bool interior = x > 0 && y > 0 && x < nx - 1 && y < ny - 1;
    const size_t stride = (size_t)nx * ny;
    const size_t idx = (size_t)y * nx + x;
    float below = 0.0f, cur = inside ? in[idx] : 0.0f;
    float above = (inside && nz > 1) ? in[idx + stride] : 0.0f;
    for (int z = 0; z < nz; ++z) {
        const size_t at = idx + z * stride;
        plane[sy][sx] = cur;
        if (threadIdx.x == 0 && x > 0 && inside) plane[sy][0] = in[at - 1];
        if (threadIdx.x == BX - 1 && x < nx - 1 && inside) plane[sy][BX + 1] = in[at + 1];
        if (threadIdx.y == 0 && y > 0 && inside) plane[0][sx] = in[at - nx];
        if (threadIdx.y == BY - 1 && y < ny - 1 && inside) plane[BY + 1][sx] = in[at + nx];
        __syncthreads();
        if (inside) {
            float v = cur;
            if (interior && z > 0 && z < nz - 1) {
                const float sum = plane[sy][sx - 1] + plane[sy][sx + 1] + plane[sy - 1][sx] +
                                  plane[sy + 1][sx] + below + above;
                v = fmaf(c0, cur, c1 * sum);
            }
            out[at] = v;
        }
        __syncthreads();
        below = cur;
        cur = above;
        above = (inside && z + 2 < nz) ? in[at + 2 * stride] : 0.0f;
    }
}

int main(int argc, char** argv)
{
    ciq::Harness h(argc, argv);
    const int nx = (int)h.size("nx", 512), ny = (int)h.size("ny", 512), nz = (int)h.size("nz", 256);
    const float c0 = (float)h.real("c0", 0.4), c1 = (float)h.real("c1", 0.1);
    const size_t count = (size_t)nx * ny * nz;
    auto in = h.input<float>("in", count);
    auto out = h.output<float>("out", count);
    const dim3 grid((nx + BX - 1) / BX, (ny + BY - 1) / BY), block(BX, BY);
    h.launch([&](cudaStream_t s) {
        stencil7<<<grid, block, 0, s>>>(in.device(), out.device(), nx, ny, nz, c0, c1);
    });
    h.reference([&] {
        const std::vector<float>& a = in.host();
        std::vector<float> ref(count);
        const size_t sy = nx, sz = (size_t)nx * ny;
        for (int z = 0; z < nz; ++z)
            for (int y = 0; y < ny; ++y)
                for (int x = 0; x < nx; ++x) {
                    const size_t i = z * sz + y * sy + x;
                    const bool interior = x > 0 && y > 0 && z > 0 && x < nx - 1 && y < ny - 1 && z < nz - 1;
                    if (!interior) {
                        ref[i] = a[i];
                        continue;
                    }
                    const double sum = (double)a[i - 1] + a[i + 1] + a[i - sy] + a[i + sy] + a[i - sz] + a[i + sz];
                    ref[i] = (float)(c0 * (double)a[i] + c1 * sum);
                }
        return h.compare(out, ref, 1e-5, 1e-6);
    });
    return h.run();
}
