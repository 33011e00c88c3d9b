// The kernels are explicit template instantiations in the header.
#include "reduce.cuh"
