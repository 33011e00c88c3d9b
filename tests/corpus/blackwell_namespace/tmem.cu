// After a tcgen05/TMA bf16 GEMM on GitHub (namespace gemm_n7168_k5120, __launch_bounds__(128) gemm
// with __grid_constant__ CUtensorMap parameters): a Blackwell kernel inside a namespace whose inline
// PTX (tcgen05) exists only in sm_100a's arch-specific feature set.
#include <cuda.h>
#include <stdint.h>

namespace gemm_n7168_k5120 {

__device__ __forceinline__ void tmem_alloc(uint32_t* dst, int ncols) {
  asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;"
               :: "r"((uint32_t)__cvta_generic_to_shared(dst)), "r"(ncols));
}
__device__ __forceinline__ void tmem_dealloc(uint32_t addr, int ncols) {
  asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;" :: "r"(addr), "r"(ncols));
}

__global__ void __launch_bounds__(128) gemm(const __grid_constant__ CUtensorMap tma_A, uint32_t* out) {
  extern __shared__ char raw[];
  uint32_t* slot = reinterpret_cast<uint32_t*>(raw);
  if (threadIdx.x < 32) tmem_alloc(slot, 256);
  __syncthreads();
  out[threadIdx.x] = *slot + (uint32_t)(uintptr_t)&tma_A;
  __syncthreads();
  if (threadIdx.x < 32) tmem_dealloc(*slot, 256);
}

}  // namespace gemm_n7168_k5120
