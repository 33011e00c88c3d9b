// Origin: karpathy/llm.c, https://github.com/karpathy/llm.c
//   dev/cuda/matmul_forward.cu (commit 071c977c79e8e23269b98ade7582dc48fb2fbd35)
// Licence: MIT (llm.c's LICENSE: Copyright (c) 2024 Andrej Karpathy). The original file carries no
//   licence header of its own; its opening comment is kept below.
// Changes for compileiq's tests: the device code (matmul_forward_kernel1, add_bias, ld_vec, st_vec,
//   matmul_forward_kernel4) is as written; the cuBLAS/cuBLASLt/OpenMP includes, "common.h", the CPU
//   reference, the launchers (matmul_forward1..4, matmul_forward) and main are removed.

/*
Kernels for matmul forward pass.
It's advised to use OpenMP here because the CPU implementation is fairly slow otherwise

Compile example:
nvcc -O3 --use_fast_math -Xcompiler -fopenmp matmul_forward.cu -o matmul_forward -lcublas -lcublasLt

version 1 is naive port from CPU code to kernel: parallelizes over B,T, loops over C
OMP_NUM_THREADS=32 ./matmul_forward 1

version 2 calls cuBLAS, very fast
OMP_NUM_THREADS=32 ./matmul_forward 2

version 3 calls cuBLASLt, should be even faster
OMP_NUM_THREADS=32 ./matmul_forward 3
*/

#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime.h>

// ----------------------------------------------------------------------------
// GPU kernels

// kernel 1: naive kernel, every thread handles one output element, direct global memory access
__global__ void matmul_forward_kernel1(float* out,
                                       const float* inp, const float* weight, const float* bias,
                                       int BT, int C, int OC) {
    // out is (B,T,OC). OC is short for "output channels", e.g. OC = 4 * C
    // inp is (B,T,C), weight is (OC, C), bias is (OC)
    // in the naive kernel, every thread handles one element of out
    int bt = blockIdx.x * blockDim.x + threadIdx.x;
    int oc = blockIdx.y * blockDim.y + threadIdx.y;
    if (bt < BT && oc < OC) {
        float val = (bias != NULL) ? bias[oc] : 0.0f;
        const float* wrow = weight + oc * C;
        const float* inp_bt = inp + bt * C;
        for (int i = 0; i < C; i++) {
            val += inp_bt[i] * wrow[i];
        }
        out[bt * OC + oc] = val;
    }
}

// is there no better way other than just adding bias with a whole separate kernel?
// this is a highly memory-bound operation, should be fused into the matmul kernel
// but i can't seem to find a cuBLAS function that does this
__global__ void add_bias(float* out, const float* bias, int B, int T, int OC) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int stride = blockDim.x * gridDim.x;
    for (int i = idx; i < B * T * OC; i += stride) {
        int col = i % OC;
        out[i] += bias[col];
    }
}

// kernel 4: register reuse kernel
__device__ float4 ld_vec(const float* address) {
    return *reinterpret_cast<const float4*>(address);
}

__device__ void st_vec(float* address, float4 val) {
    *reinterpret_cast<float4*>(address) = val;
}

__global__ void matmul_forward_kernel4(float* out,
                                       const float* inp, const float* weight, const float* bias,
                                       int BT, int C, int OC) {
    // out is (B,T,OC). OC is short for "output channels", e.g. OC = 4 * C
    // inp is (B,T,C), weight is (OC, C), bias is (OC)
    // in the naive kernel, every thread handles one element of out
    int bt = 8*(blockIdx.x * blockDim.x + threadIdx.x);
    int oc = 8*(blockIdx.y * blockDim.y + threadIdx.y);
    if (bt < BT && oc < OC) {
        float vals[8][8] = {};
        if(bias != NULL) {
            for (int i = 0; i < 8; i++) {
                for (int j = 0; j < 8; j += 4) {
                    float4 b =ld_vec(bias + oc + j);
                    vals[i][j+0] = b.x;
                    vals[i][j+1] = b.y;
                    vals[i][j+2] = b.z;
                    vals[i][j+3] = b.w;
                }
            }
        }

        for (int k = 0; k < C; k += 4) {
            float4 rhs[8];
            for (int u = 0; u < 8; ++u) {
                rhs[u] = ld_vec(weight + k + (oc+u) * C);
            }
            for (int i = 0; i < 8; ++i) {
                float4 lhs = ld_vec(inp + k + (bt+i) * C);
                for (int j = 0; j < 8; ++j) {
                    vals[i][j] += lhs.x * rhs[j].x;
                    vals[i][j] += lhs.y * rhs[j].y;
                    vals[i][j] += lhs.z * rhs[j].z;
                    vals[i][j] += lhs.w * rhs[j].w;
                }
            }
        }
        for (int i = 0; i < 8; ++i) {
            for (int j = 0; j < 8; j += 4) {
                float4 result;
                result.x = vals[i][j + 0];
                result.y = vals[i][j + 1];
                result.z = vals[i][j + 2];
                result.w = vals[i][j + 3];
                st_vec(out + (bt+i) * OC + oc + j, result);
            }
        }
    }
}
