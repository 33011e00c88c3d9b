// After NVIDIA/cuda-samples Samples/0_Introduction/simpleSeparateCompilation (BSD-3): the kernel
// applies a __device__ function that another file defines, so it builds only with -rdc=true.
__device__ float multiplyByTwo(float number);

typedef float (*deviceFunc)(float);
__device__ deviceFunc dMultiplyByTwoPtr = multiplyByTwo;

__global__ void transformVector(float *v, deviceFunc f, unsigned int size) {
  unsigned int tid = blockIdx.x * blockDim.x + threadIdx.x;
  if (tid < size) {
    v[tid] = (*f)(v[tid]) + multiplyByTwo(v[tid]);
  }
}
