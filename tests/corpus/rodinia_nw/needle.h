// Test input, third-party code: Rodinia's nw (Needleman-Wunsch, two kernels in an included file,
// a host main), as kept in jchen706/gpu-rodinia cuda/nw (commit 91048ce3; needle.h from
// vancemiller/pannotia cuda/nw, commit 67d70da4, the Rodinia 3.1 header); the Rodinia benchmark
// suite's licence (University of Virginia, BSD-style). Unchanged below this header.

#ifdef RD_WG_SIZE_0_0
#define BLOCK_SIZE RD_WG_SIZE_0_0
#elif defined(RD_WG_SIZE_0)
#define BLOCK_SIZE RD_WG_SIZE_0
#elif defined(RD_WG_SIZE)
#define BLOCK_SIZE RD_WG_SIZE
#else
#define BLOCK_SIZE 16
#endif
//#define TRACE

