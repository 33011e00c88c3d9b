// After sampan26/cuda_bits hopper/gemm/src/matmul_v1.cu: a Hopper kernel's inline PTX uses wgmma,
// which exists only in the arch-specific feature set (sm_90a), not in plain sm_90.
__device__ void warpgroup_arrive() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__global__ void __launch_bounds__(128) arrive(float* out) {
  warpgroup_arrive();
  out[threadIdx.x] = 1.0f;
}
