#pragma once
#include "bounds.h"

extern "C" __global__ void __launch_bounds__(SCAN_THREADS) scan_tile(const float* in, float* out, int n) {
    __shared__ float tile[SCAN_THREADS];
    int i = blockIdx.x * SCAN_THREADS + threadIdx.x;
    tile[threadIdx.x] = i < n ? in[i] : 0.0f;
    __syncthreads();
    for (int s = 1; s < SCAN_THREADS; s <<= 1) {
        float v = threadIdx.x >= s ? tile[threadIdx.x - s] : 0.0f;
        __syncthreads();
        tile[threadIdx.x] += v;
        __syncthreads();
    }
    if (i < n) out[i] = tile[threadIdx.x];
}

extern "C" __global__ void __launch_bounds__(COPY_THREADS) copy4(const float4* in, float4* out, int n) {
    int i = blockIdx.x * COPY_THREADS + threadIdx.x;
    if (i < n) out[i] = in[i];
}

extern "C" __global__ void stage(const float* in, float* out, int n) {
    extern __shared__ float buffer[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    buffer[threadIdx.x] = i < n ? in[i] : 0.0f;
    __syncthreads();
    if (i < n) out[i] = buffer[blockDim.x - 1 - threadIdx.x];
}
