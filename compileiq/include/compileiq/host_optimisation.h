/* compileiq: pre-included (first, before cuda_runtime.h) by the measuring program's build, which
 * passes the host compiler -O2 for its host code. nvcc preprocesses the device pass with the host
 * compiler and its options, so -O2 also changed the macros that pass predefines: __OPTIMIZE__ was
 * defined and __NO_INLINE__ was not, and a kernel that reads them was timed as other code than the
 * cubin compileiq builds without -O2 (and records). The device pass gets back the macros of the
 * host compiler's default level; the host passes keep -O2's. */
#ifdef __CUDA_ARCH__
#undef __OPTIMIZE__
#undef __OPTIMIZE_SIZE__
#ifndef __NO_INLINE__
#define __NO_INLINE__ 1
#endif
#endif
