// A program with its own main that times its kernel and prints the time: what `--program`
// (tune.toml `mode = "program"`) tunes. UNROLL 1 reads each input once; UNROLL 8 reads it eight
// times (same result), so it is slower. Usage: program_timed [N] (default 2^24 floats).
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#ifndef UNROLL
#define UNROLL 1
#endif

__global__ void scale(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float acc = 0.0f;
#pragma unroll
  for (int k = 0; k < UNROLL; ++k) acc += x[(i + k * 4099) % n];
  y[i] = acc;
}

#define CHECK(call)                                                              \
  do {                                                                           \
    cudaError_t err = (call);                                                    \
    if (err != cudaSuccess) {                                                    \
      std::fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(err));         \
      return 2;                                                                  \
    }                                                                            \
  } while (0)

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : (1 << 24);
  float *x = nullptr, *y = nullptr;
  CHECK(cudaMalloc(&x, sizeof(float) * n));
  CHECK(cudaMalloc(&y, sizeof(float) * n));
  CHECK(cudaMemset(x, 0, sizeof(float) * n));
  const int threads = 256, blocks = (n + threads - 1) / threads;
  scale<<<blocks, threads>>>(x, y, n);  // warm-up
  CHECK(cudaDeviceSynchronize());
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  const int repeats = 20;
  CHECK(cudaEventRecord(start));
  for (int r = 0; r < repeats; ++r) scale<<<blocks, threads>>>(x, y, n);
  CHECK(cudaEventRecord(stop));
  CHECK(cudaEventSynchronize(stop));
  CHECK(cudaGetLastError());
  float ms = 0.0f;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  std::printf("elapsed: %.5f ms\n", ms / repeats);
  return 0;
}
