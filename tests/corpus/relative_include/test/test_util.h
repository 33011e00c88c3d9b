// Shape of NVIDIA/cccl's cub/examples (BSD-3): the examples include their helpers by a quoted path
// that climbs out of the example's folder, "../../test/test_util.h"; this stand-in is written here.
#pragma once
#define ITEMS_PER_THREAD 4
