#pragma once

template <int BLOCK, typename T>
__global__ void __launch_bounds__(BLOCK) block_sum(const T* in, T* out, int n) {
    __shared__ T partial[BLOCK];
    int i = blockIdx.x * BLOCK + threadIdx.x;
    partial[threadIdx.x] = i < n ? in[i] : T(0);
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

template __global__ void block_sum<256, float>(const float*, float*, int);
template __global__ void block_sum<128, double>(const double*, double*, int);
