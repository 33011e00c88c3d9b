// Header-only kernels, tuned as the file itself.
#pragma once

__device__ __forceinline__ float clamp01(float v) { return fminf(fmaxf(v, 0.0f), 1.0f); }

__global__ void normalize(float* data, int n, float lo, float hi) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] = clamp01((data[i] - lo) / (hi - lo));
}

__global__ void histogram(const float* data, int n, unsigned* bins, int nbins) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&bins[min(int(data[i] * nbins), nbins - 1)], 1u);
}
