// A program whose kernels are in an included .cu file: main.cu itself defines none.
#include <cstdio>
#include "kernel.cu"

int main() {
    const int n = 1 << 20;
    float *x, *y;
    cudaMalloc(&x, n * sizeof(float));
    cudaMalloc(&y, n * sizeof(float));
    saxpy<<<(n + 255) / 256, 256>>>(n, 2.0f, x, y);
    cudaDeviceSynchronize();
    std::printf("done\n");
    cudaFree(x);
    cudaFree(y);
    return 0;
}
