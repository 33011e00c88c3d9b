// A combustion-style reaction-rate kernel: 48 species concentrations and their rates stay live
// through an unrolled Arrhenius network, so the kernel needs many registers per thread.
#define SPECIES 48

extern "C" __global__ void __launch_bounds__(128) chemistry(const float* __restrict__ conc, const float* __restrict__ temp,
                                                            float* __restrict__ rates, int cells) {
    const int cell = blockIdx.x * blockDim.x + threadIdx.x;
    if (cell >= cells) return;
    float c[SPECIES], w[SPECIES];
    const float t = temp[cell], inv_t = 1.0f / t, log_t = __logf(t);
    #pragma unroll
    for (int s = 0; s < SPECIES; ++s) { c[s] = conc[s * cells + cell]; w[s] = 0.0f; }
    #pragma unroll
    for (int r = 0; r < SPECIES; ++r) {
        const int p = (r * 7 + 3) % SPECIES, q = (r * 13 + 5) % SPECIES, o = (r * 29 + 11) % SPECIES;
        const float kf = __expf(0.1f * r + (0.5f + 0.01f * r) * log_t - (1000.0f + 37.0f * r) * inv_t);
        const float kb = __expf(0.2f * r - (1500.0f + 11.0f * r) * inv_t);
        const float q_r = kf * c[p] * c[q] - kb * c[o] * c[r];
        w[p] -= q_r; w[q] -= q_r; w[o] += q_r; w[r] += q_r;
    }
    #pragma unroll
    for (int s = 0; s < SPECIES; ++s) rates[s * cells + cell] = w[s] * c[(s + 1) % SPECIES];
}
