// The kernel itself is tiny; its __noinline__ device function keeps 128 values live and spills in
// its own frame. ptxas reports those spills under "Function properties for" the callee, not
// under the kernel.
__device__ __noinline__ float fir128(const float* in, int i, int n) {
    float taps[128];
    #pragma unroll
    for (int k = 0; k < 128; ++k) taps[k] = in[(i * 7 + k * 13) % n];
    float acc = 0.0f;
    #pragma unroll
    for (int k = 0; k < 128; ++k) acc += taps[k] * taps[127 - k] * taps[(k * 37) % 128];
    return acc;
}

extern "C" __global__ void __launch_bounds__(256, 2) noinline_callee(const float* in, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = fir128(in, i, n);
}
