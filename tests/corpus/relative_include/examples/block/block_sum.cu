// Layout of NVIDIA/cccl cub/examples/block/example_block_reduce.cu (BSD-3): the include below
// climbs two folders; tune.toml's include_dirs names the folder that holds it.
#include <cub/block/block_reduce.cuh>

#include "../../test/test_util.h"

template <int BLOCK_THREADS>
__global__ void BlockSumKernel(const int* d_in, int* d_out) {
  using BlockReduceT = cub::BlockReduce<int, BLOCK_THREADS>;
  __shared__ typename BlockReduceT::TempStorage temp_storage;
  int data[ITEMS_PER_THREAD];
  for (int i = 0; i < ITEMS_PER_THREAD; ++i) data[i] = d_in[threadIdx.x * ITEMS_PER_THREAD + i];
  int aggregate = BlockReduceT(temp_storage).Sum(data);
  if (threadIdx.x == 0) *d_out = aggregate;
}

template __global__ void BlockSumKernel<128>(const int*, int*);
