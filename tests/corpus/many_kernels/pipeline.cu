// Several kernels with different block sizes: two from __launch_bounds__ in a header, one from
// the [launch] table (with its dynamic shared memory).
#include "kernels.cuh"
