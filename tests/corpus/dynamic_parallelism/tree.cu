// Dynamic parallelism: a parent kernel launches a child grid (needs -rdc=true).
__global__ void child(float* data, int offset, int n) {
    int i = offset + blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] = sqrtf(data[i]) + 1.0f;
}

__global__ void parent(float* data, int n, int chunk) {
    int offset = blockIdx.x * chunk;
    if (threadIdx.x == 0 && offset < n) child<<<(chunk + 127) / 128, 128>>>(data, offset, n);
}
