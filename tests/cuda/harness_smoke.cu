// Smoke test of the compileiq harness: saxpy with a CPU reference.
#include <compileiq/harness.cuh>

__global__ void saxpy(const float* x, float* y, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + 1.0f;
}

int main(int argc, char** argv) {
  ciq::Harness h(argc, argv);
  const int n = h.size("n", 1 << 24);
  const float a = static_cast<float>(h.real("a", 2.0));
  auto x = h.input<float>("x", n);
  auto idx = h.input<int32_t>("idx", 16, [](std::mt19937& g, size_t i) { return int32_t(i + g() % 2); });
  auto y = h.output<float>("y", n);
  h.launch([&](cudaStream_t s) { saxpy<<<(n + 255) / 256, 256, 0, s>>>(x.device(), y.device(), a, n); });
  h.reference([&] {
    std::vector<float> ref(n);
    for (int i = 0; i < n; ++i) ref[i] = a * x.host()[i] + 1.0f;
    (void)idx;
    return h.compare(y, ref, 1e-5, 1e-6);
  });
  return h.run();
}
