// After siboehm/SGEMM_CUDA src/kernels/*.cuh (MIT): a header of kernel templates that only the
// project's runner.cu instantiates; compiled alone it holds no kernel.
#pragma once

template <const int BM, const int BN, const int BK>
__global__ void sgemmTiled(int M, int N, int K, const float *A, const float *B, float *C) {
  __shared__ float As[BM * BK];
  __shared__ float Bs[BK * BN];
  float acc = 0.0f;
  for (int k = 0; k < K; k += BK) {
    As[threadIdx.x % (BM * BK)] = A[blockIdx.y * BM * K + k + threadIdx.x % BK];
    Bs[threadIdx.x % (BK * BN)] = B[(k + threadIdx.x % BK) * N + blockIdx.x * BN];
    __syncthreads();
    for (int i = 0; i < BK; ++i) acc += As[i] * Bs[i * BN];
    __syncthreads();
  }
  C[blockIdx.y * N + blockIdx.x * BN + threadIdx.x] = acc;
}
