// compileiq measuring harness: header-only, C++17, CUDA runtime API.
//
// A kernel file becomes a small program: declare sizes, inputs and outputs, give a launch
// function (and optionally a CPU reference), then `return h.run();`. The harness warms up,
// times samples with CUDA events (L2 flushed and outputs poisoned before each), drops samples
// taken at a low SM clock (NVML, if present), verifies every output element was written, and
// prints ONE JSON line on stdout. Build: nvcc -std=c++17 -I "$(compileiq include-dir)" main.cu -ldl
//
// Exit codes: 0 ok, 1 error, 2 check_failed, 3 unwritten_output.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ciq {
namespace detail {

// ---------------------------------------------------------------- JSON and SHA-256 helpers

inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') { out += '\\'; out += static_cast<char>(c); }
    else if (c == '\n') out += "\\n";
    else if (c < 0x20) { char buf[8]; std::snprintf(buf, sizeof buf, "\\u%04x", c); out += buf; }
    else out += static_cast<char>(c);
  }
  return out + "\"";
}

inline std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

template <class T, class F>
std::string json_join(const std::vector<T>& values, F format) {  // "a,b,c": a list's or an object's body
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + format(values[i]);
  return out;
}

template <class T, class F>
std::string json_list(const std::vector<T>& values, F format) {
  return "[" + json_join(values, format) + "]";
}

class Sha256 {
 public:
  void update(const void* data, size_t n) {
    auto p = static_cast<const uint8_t*>(data);
    length_ += n;
    while (n--) {
      buffer_[used_++] = *p++;
      if (used_ == 64) { block(buffer_); used_ = 0; }
    }
  }
  std::string hex() {
    uint64_t bits = length_ * 8;
    uint8_t pad = 0x80;
    update(&pad, 1);
    pad = 0;
    while (used_ != 56) update(&pad, 1);
    for (int i = 7; i >= 0; --i) { uint8_t b = static_cast<uint8_t>(bits >> (8 * i)); update(&b, 1); }
    char out[65];
    for (int i = 0; i < 8; ++i) std::snprintf(out + 8 * i, 9, "%08x", h_[i]);
    return std::string(out, 64);
  }

 private:
  static uint32_t rotr(uint32_t x, int r) { return (x >> r) | (x << (32 - r)); }
  void block(const uint8_t* p) {
    static const uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
    uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = uint32_t(p[4 * i]) << 24 | uint32_t(p[4 * i + 1]) << 16 | uint32_t(p[4 * i + 2]) << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; ++i) {
      uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
    for (int i = 0; i < 64; ++i) {
      uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    uint32_t add[8] = {a, b, c, d, e, f, g, h};
    for (int i = 0; i < 8; ++i) h_[i] += add[i];
  }
  uint32_t h_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  uint8_t buffer_[64] = {};
  size_t used_ = 0;
  uint64_t length_ = 0;
};

inline std::string sha256_hex(const void* data, size_t n) {
  Sha256 s;
  s.update(data, n);
  return s.hex();
}

// ---------------------------------------------------------------- the report (one JSON line)

struct OutputInfo {
  std::string name, dtype;
  size_t count;
  std::string sha256;
};

struct Report {
  std::string status = "error", message, device, driver;
  std::optional<unsigned> sm_clock_default_mhz;
  std::vector<double> samples_ms;
  std::vector<unsigned> clocks_mhz;
  int dropped_low_clock = 0;
  double median_ms = NAN, iqr_ms = NAN, min_ms = NAN, event_median_ms = NAN;
  int graph_batch = 0;
  std::vector<OutputInfo> outputs;
  bool check_run = false;
  std::optional<bool> check_passed;
  double max_abs_err = NAN, max_rel_err = NAN;
  std::vector<std::pair<std::string, double>> phases_ms;  // where the process's wall time went
};

// The process's start, taken before main(): the first phase counts from here.
inline const std::chrono::steady_clock::time_point process_start = std::chrono::steady_clock::now();

inline std::string to_json(const Report& r) {
  auto num = [](double v) { return json_number(v); };
  auto clock = [](unsigned v) { return std::to_string(v); };
  auto phase = [](const std::pair<std::string, double>& p) { return json_string(p.first) + ":" + json_number(p.second); };
  auto output = [](const OutputInfo& o) {
    return "{\"name\":" + json_string(o.name) + ",\"dtype\":" + json_string(o.dtype) +
           ",\"count\":" + std::to_string(o.count) + ",\"sha256\":" + json_string(o.sha256) + "}";
  };
  std::ostringstream j;
  j << "{\"compileiq_harness\":1,\"status\":" << json_string(r.status)
    << ",\"message\":" << json_string(r.message) << ",\"device\":" << json_string(r.device)
    << ",\"driver\":" << json_string(r.driver) << ",\"sm_clock_default_mhz\":"
    << (r.sm_clock_default_mhz ? std::to_string(*r.sm_clock_default_mhz) : "null")
    << ",\"samples_ms\":" << json_list(r.samples_ms, num)
    << ",\"clocks_mhz\":" << json_list(r.clocks_mhz, clock)
    << ",\"dropped_low_clock\":" << r.dropped_low_clock << ",\"median_ms\":" << num(r.median_ms)
    << ",\"iqr_ms\":" << num(r.iqr_ms) << ",\"min_ms\":" << num(r.min_ms)
    << ",\"event_median_ms\":" << num(r.event_median_ms) << ",\"graph_batch\":" << r.graph_batch
    << ",\"outputs\":" << json_list(r.outputs, output) << ",\"check\":{\"run\":"
    << (r.check_run ? "true" : "false") << ",\"passed\":"
    << (r.check_passed ? (*r.check_passed ? "true" : "false") : "null")
    << ",\"max_abs_err\":" << num(r.max_abs_err) << ",\"max_rel_err\":" << num(r.max_rel_err) << "}"
    << ",\"phases_ms\":{" << json_join(r.phases_ms, phase) << "}}";
  return j.str();
}

inline Report& context() {  // what an early failure can still report (device, driver)
  static Report report;
  return report;
}

[[noreturn]] inline void fail(const std::string& message) {
  Report r;
  r.device = context().device;
  r.driver = context().driver;
  r.message = message;
  std::printf("%s\n", to_json(r).c_str());
  std::fflush(stdout);
  std::exit(1);
}

inline void check_cuda(cudaError_t e, const char* what, const char* file, int line) {
  if (e == cudaSuccess) return;
  fail(std::string(file) + ":" + std::to_string(line) + ": " + what + ": " + cudaGetErrorName(e) +
       ": " + cudaGetErrorString(e));
}

}  // namespace detail

#define CIQ_CUDA(call) ::ciq::detail::check_cuda((call), #call, __FILE__, __LINE__)

// ---------------------------------------------------------------- element types

template <class T> struct DType;
template <> struct DType<float> {
  static constexpr const char* name = "float32";
  static double to_double(float v) { return v; }
  static float random(std::mt19937& g) { return std::uniform_real_distribution<float>(-1.f, 1.f)(g); }
};
template <> struct DType<double> {
  static constexpr const char* name = "float64";
  static double to_double(double v) { return v; }
  static double random(std::mt19937& g) { return std::uniform_real_distribution<double>(-1., 1.)(g); }
};
template <> struct DType<int32_t> {  // random: uniform in [-100, 100)
  static constexpr const char* name = "int32";
  static double to_double(int32_t v) { return v; }
  static int32_t random(std::mt19937& g) { return std::uniform_int_distribution<int32_t>(-100, 99)(g); }
};
template <> struct DType<uint32_t> {  // random: uniform in [0, 100)
  static constexpr const char* name = "uint32";
  static double to_double(uint32_t v) { return v; }
  static uint32_t random(std::mt19937& g) { return std::uniform_int_distribution<uint32_t>(0, 99)(g); }
};
template <> struct DType<int8_t> {  // random: uniform in [-8, 8)
  static constexpr const char* name = "int8";
  static double to_double(int8_t v) { return v; }
  static int8_t random(std::mt19937& g) { return static_cast<int8_t>(std::uniform_int_distribution<int>(-8, 7)(g)); }
};
template <> struct DType<__half> {
  static constexpr const char* name = "float16";
  static double to_double(__half v) { return __half2float(v); }
  static __half random(std::mt19937& g) { return __float2half(std::uniform_real_distribution<float>(-1.f, 1.f)(g)); }
};

// ---------------------------------------------------------------- buffers and their handles

namespace detail {
struct Buffer {
  std::string name, dtype;
  size_t count = 0, element = 0;
  void* device = nullptr;
  std::vector<unsigned char> result;  // an output's bytes after run()
  size_t bytes() const { return count * element; }
  virtual ~Buffer() { if (device) cudaFree(device); }
};
template <class T> struct TypedBuffer : Buffer {
  std::vector<T> host;
};
}  // namespace detail

template <class T> class Input {
 public:
  explicit Input(detail::TypedBuffer<T>* b) : b_(b) {}
  T* device() const { return static_cast<T*>(b_->device); }
  const std::vector<T>& host() const { return b_->host; }
  size_t count() const { return b_->count; }
  const std::string& name() const { return b_->name; }
 private:
  detail::TypedBuffer<T>* b_;
};

template <class T> class Output {
 public:
  explicit Output(detail::TypedBuffer<T>* b) : b_(b) {}
  T* device() const { return static_cast<T*>(b_->device); }
  size_t count() const { return b_->count; }
  const std::string& name() const { return b_->name; }
  std::vector<T> fetch() const {  // the device contents now (after run(): the last launch's output)
    std::vector<T> out(b_->count);
    CIQ_CUDA(cudaDeviceSynchronize());
    CIQ_CUDA(cudaMemcpy(out.data(), b_->device, b_->bytes(), cudaMemcpyDeviceToHost));
    return out;
  }
 private:
  detail::TypedBuffer<T>* b_;
};

struct CheckResult {
  bool passed = true;
  double max_abs_err = 0, max_rel_err = 0;
  size_t mismatches = 0;
  CheckResult& operator&=(const CheckResult& o) {
    passed = passed && o.passed;
    max_abs_err = std::max(max_abs_err, o.max_abs_err);
    max_rel_err = std::max(max_rel_err, o.max_rel_err);
    mismatches += o.mismatches;
    return *this;
  }
};

// ---------------------------------------------------------------- options

struct Options {
  int samples = 10;       // --samples N: at least N kept samples
  int max_samples = 0;    // --max-samples N: at most N (0: no cap); confirmation uses N = samples
  double min_time_ms = 500, max_time_s = 15, warmup_ms = 25;
  bool flush = true, quick = false, check = false, graph = true;
  bool timing_only = false;  // --timing-only: samples alone (confirmation blocks of a build already verified)
  unsigned seed = 1;
  int device = 0;
  std::string dump;
  std::map<std::string, std::string> sets;
};

inline Options parse_options(int argc, char** argv) {
  Options o;
  std::map<std::string, std::string> given;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    auto eq = arg.find('=');
    bool has_value = arg.rfind("--", 0) == 0 && eq != std::string::npos;
    if (has_value) { value = arg.substr(eq + 1); arg = arg.substr(0, eq); }
    static const std::set<std::string> switches = {"--no-flush", "--quick", "--check", "--no-graph",
                                                   "--timing-only"};
    static const std::set<std::string> valued = {"--samples", "--max-samples", "--min-time-ms", "--max-time-s",
                                                 "--warmup-ms", "--seed", "--device", "--dump", "--set"};
    if (switches.count(arg) && !has_value) { given[arg] = "1"; continue; }
    if (!valued.count(arg)) detail::fail("unknown harness option " + arg);
    if (!has_value) {
      if (i + 1 >= argc) detail::fail("harness option " + arg + " needs a value");
      value = argv[++i];
    }
    if (arg == "--set") {
      auto at = value.find('=');
      if (at == std::string::npos || at == 0) detail::fail("--set needs NAME=VALUE, got '" + value + "'");
      o.sets[value.substr(0, at)] = value.substr(at + 1);
    } else {
      given[arg] = value;
    }
  }
  if (given.count("--quick")) { o.quick = true; o.samples = 5; o.min_time_ms = 100; o.max_time_s = 1; o.warmup_ms = 10; }
  try {
    for (auto& [key, v] : given) {
      if (key == "--samples") o.samples = std::stoi(v);
      else if (key == "--max-samples") o.max_samples = std::stoi(v);
      else if (key == "--min-time-ms") o.min_time_ms = std::stod(v);
      else if (key == "--max-time-s") o.max_time_s = std::stod(v);
      else if (key == "--warmup-ms") o.warmup_ms = std::stod(v);
      else if (key == "--seed") o.seed = static_cast<unsigned>(std::stoul(v));
      else if (key == "--device") o.device = std::stoi(v);
      else if (key == "--dump") o.dump = v;
      else if (key == "--no-flush") o.flush = false;
      else if (key == "--check") o.check = true;
      else if (key == "--no-graph") o.graph = false;
      else if (key == "--timing-only") o.timing_only = true;
      else if (key != "--quick") detail::fail("unknown harness option " + key);  // unreachable
    }
  } catch (const std::logic_error&) {
    detail::fail("a harness option has a value that is not a number");
  }
  if (o.samples < 1) o.samples = 1;
  if (o.timing_only && (o.check || !o.dump.empty()))
    detail::fail("--timing-only verifies no outputs: it takes neither --check nor --dump");
  return o;
}

// ---------------------------------------------------------------- NVML, opened at run time

class Nvml {
 public:
  explicit Nvml(const char* pci_bus_id) {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib_) return;
    auto init = reinterpret_cast<int (*)()>(dlsym(lib_, "nvmlInit_v2"));
    auto handle = reinterpret_cast<int (*)(const char*, void**)>(dlsym(lib_, "nvmlDeviceGetHandleByPciBusId_v2"));
    clock_ = reinterpret_cast<Clock>(dlsym(lib_, "nvmlDeviceGetClockInfo"));
    default_ = reinterpret_cast<Clock>(dlsym(lib_, "nvmlDeviceGetDefaultApplicationsClock"));
    driver_ = reinterpret_cast<int (*)(char*, unsigned)>(dlsym(lib_, "nvmlSystemGetDriverVersion"));
    shutdown_ = reinterpret_cast<int (*)()>(dlsym(lib_, "nvmlShutdown"));
    ok_ = init && handle && init() == 0 && handle(pci_bus_id, &device_) == 0;
  }
  ~Nvml() {
    if (ok_ && shutdown_) shutdown_();
    if (lib_) dlclose(lib_);
  }
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;
  std::optional<unsigned> sm_clock() const { return query(clock_); }
  std::optional<unsigned> default_sm_clock() const { return query(default_); }
  std::string driver() const {
    char text[96] = {};
    return ok_ && driver_ && driver_(text, sizeof text) == 0 ? std::string(text) : std::string();
  }

 private:
  using Clock = int (*)(void*, int, unsigned*);
  static constexpr int kClockSm = 1;  // NVML_CLOCK_SM
  std::optional<unsigned> query(Clock f) const {
    unsigned mhz = 0;
    if (ok_ && f && f(device_, kClockSm, &mhz) == 0 && mhz > 0) return mhz;
    return std::nullopt;
  }
  void* lib_ = nullptr;
  void* device_ = nullptr;
  bool ok_ = false;
  Clock clock_ = nullptr, default_ = nullptr;
  int (*driver_)(char*, unsigned) = nullptr;
  int (*shutdown_)() = nullptr;
};

// ---------------------------------------------------------------- statistics of samples

namespace detail {
inline double quantile(std::vector<double> v, double q) {  // linear interpolation, as numpy
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  double pos = q * (v.size() - 1);
  size_t lo = static_cast<size_t>(pos);
  size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - lo);
}
inline double relative_stdev(const std::vector<double>& v) {
  if (v.size() < 2) return INFINITY;
  double mean = 0, var = 0;
  for (double x : v) mean += x;
  mean /= v.size();
  for (double x : v) var += (x - mean) * (x - mean);
  return mean > 0 ? std::sqrt(var / (v.size() - 1)) / mean : INFINITY;
}
struct Series {
  std::vector<double> ms;
  std::vector<unsigned> clocks;
  int dropped = 0;
};
}  // namespace detail

// ---------------------------------------------------------------- the harness

class Harness {
 public:
  using Launch = std::function<void(cudaStream_t)>;

  Harness(int argc, char** argv) : options_(parse_options(argc, argv)) {
    CIQ_CUDA(cudaSetDevice(options_.device));
    CIQ_CUDA(cudaFree(nullptr));  // create the context outside anything timed
    mark("cuda_context");  // from the process's start: loading, the CUDA runtime's and the driver's start
    cudaDeviceProp prop{};
    CIQ_CUDA(cudaGetDeviceProperties(&prop, options_.device));
    char bus[32] = {};
    CIQ_CUDA(cudaDeviceGetPCIBusId(bus, sizeof bus, options_.device));
    nvml_ = std::make_unique<Nvml>(bus);
    int version = 0;
    CIQ_CUDA(cudaDriverGetVersion(&version));
    std::string nvml_driver = nvml_->driver();
    report_.device = prop.name;
    report_.driver = nvml_driver.empty()
        ? "cuda " + std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10)
        : nvml_driver;
    report_.sm_clock_default_mhz = nvml_->default_sm_clock();
    detail::context() = report_;
    flush_bytes_ = static_cast<size_t>(std::max(prop.l2CacheSize, 1 << 20)) * 2;
    CIQ_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CIQ_CUDA(cudaEventCreate(&start_));
    CIQ_CUDA(cudaEventCreate(&stop_));
    if (options_.flush) CIQ_CUDA(cudaMalloc(&flush_, flush_bytes_));
    mark("device_setup");
  }

  ~Harness() {
    buffers_.clear();
    if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
    if (flush_) cudaFree(flush_);
    if (start_) cudaEventDestroy(start_);
    if (stop_) cudaEventDestroy(stop_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  Harness(const Harness&) = delete;
  Harness& operator=(const Harness&) = delete;

  const Options& options() const { return options_; }
  cudaStream_t stream() const { return stream_; }

  /// A problem size, overridable with --set NAME=VALUE.
  int64_t size(const std::string& name, int64_t fallback) {
    read_.insert(name);
    auto it = options_.sets.find(name);
    if (it == options_.sets.end()) return fallback;
    try { return std::stoll(it->second); } catch (const std::logic_error&) {
      detail::fail("--set " + name + "=" + it->second + " is not an integer");
    }
  }

  /// A real-valued parameter, overridable with --set NAME=VALUE.
  double real(const std::string& name, double fallback) {
    read_.insert(name);
    auto it = options_.sets.find(name);
    if (it == options_.sets.end()) return fallback;
    try { return std::stod(it->second); } catch (const std::logic_error&) {
      detail::fail("--set " + name + "=" + it->second + " is not a number");
    }
  }

  /// A device input, seeded uniform random ([-1, 1) for floats; see DType for integers).
  template <class T> Input<T> input(const std::string& name, size_t count) {
    return input<T>(name, count, [](std::mt19937& g, size_t) { return DType<T>::random(g); });
  }

  /// A device input from a generator `(std::mt19937&, size_t i) -> T` (seeded per name).
  template <class T, class Gen> Input<T> input(const std::string& name, size_t count, Gen&& gen) {
    std::vector<T> host(count);
    std::mt19937 rng = generator(name);
    for (size_t i = 0; i < count; ++i) host[i] = static_cast<T>(gen(rng, i));
    return input_host<T>(name, std::move(host));
  }

  /// A device input prepared on the host.
  template <class T> Input<T> input_host(const std::string& name, std::vector<T> host) {
    auto* b = allocate<T>(name, host.size(), false);
    b->host = std::move(host);
    CIQ_CUDA(cudaMemcpy(b->device, b->host.data(), b->bytes(), cudaMemcpyHostToDevice));
    return Input<T>(b);
  }

  /// A device output: poisoned (all bytes 0xFF) before every launch, checked for unwritten elements.
  template <class T> Output<T> output(const std::string& name, size_t count) {
    return Output<T>(allocate<T>(name, count, true));
  }

  void launch(Launch fn) { launch_ = std::move(fn); }
  void reference(std::function<CheckResult()> fn) { reference_ = std::move(fn); }

  /// Compare an output against a CPU reference: |got - ref| <= atol + rtol * |ref|; NaN never passes.
  template <class T>
  CheckResult compare(const Output<T>& got, const std::vector<T>& ref, double rtol, double atol) const {
    return compare(got.fetch(), ref, rtol, atol);
  }
  template <class T>
  CheckResult compare(const std::vector<T>& got, const std::vector<T>& ref, double rtol, double atol) const {
    CheckResult r;
    if (got.size() != ref.size()) { r.passed = false; r.max_abs_err = r.max_rel_err = INFINITY; return r; }
    for (size_t i = 0; i < got.size(); ++i) {
      double g = DType<T>::to_double(got[i]), e = DType<T>::to_double(ref[i]);
      double abs_err = std::fabs(g - e);
      double rel_err = abs_err / std::max(std::fabs(e), 1e-30);
      bool ok = std::isfinite(abs_err) ? abs_err <= atol + rtol * std::fabs(e) : g == e;
      if (std::isnan(g) || std::isnan(e)) { ok = false; abs_err = rel_err = INFINITY; }
      if (!ok) ++r.mismatches;
      r.passed = r.passed && ok;
      r.max_abs_err = std::max(r.max_abs_err, abs_err);
      r.max_rel_err = std::max(r.max_rel_err, rel_err);
    }
    return r;
  }

  /// Warm up, time, verify, check, dump; print one JSON line; return the exit code.
  int run() {
    try {
      return run_checked();
    } catch (const std::exception& e) {
      detail::fail(std::string("exception: ") + e.what());
    }
  }

 private:
  std::mt19937 generator(const std::string& name) const {
    uint32_t h = 2166136261u;  // FNV-1a of the name: each input its own stream
    for (unsigned char c : name) h = (h ^ c) * 16777619u;
    std::seed_seq seq{options_.seed, h};
    return std::mt19937(seq);
  }

  template <class T> detail::TypedBuffer<T>* allocate(const std::string& name, size_t count, bool output) {
    for (auto& b : buffers_)
      if (b->name == name) detail::fail("buffer name '" + name + "' is declared twice");
    auto b = std::make_unique<detail::TypedBuffer<T>>();
    b->name = name;
    b->dtype = DType<T>::name;
    b->count = count;
    b->element = sizeof(T);
    CIQ_CUDA(cudaMalloc(&b->device, std::max<size_t>(b->bytes(), 1)));
    auto* raw = b.get();
    (output ? outputs_ : inputs_).push_back(raw);
    buffers_.push_back(std::move(b));
    return raw;
  }

  void poison(int byte) {
    for (auto* o : outputs_) CIQ_CUDA(cudaMemsetAsync(o->device, byte, o->bytes(), stream_));
  }
  void flush_l2() {
    if (flush_) CIQ_CUDA(cudaMemsetAsync(flush_, ++flush_value_ & 0xFF, flush_bytes_, stream_));
  }
  void launch_checked() {
    launch_(stream_);
    CIQ_CUDA(cudaGetLastError());
  }
  double elapsed_ms() {
    CIQ_CUDA(cudaEventSynchronize(stop_));
    CIQ_CUDA(cudaGetLastError());
    float ms = 0;
    CIQ_CUDA(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

  double single_sample() {  // one launch: flush and poison outside the events
    flush_l2();
    poison(0xFF);
    CIQ_CUDA(cudaEventRecord(start_, stream_));
    launch_checked();
    CIQ_CUDA(cudaEventRecord(stop_, stream_));
    return elapsed_ms();
  }

  double graph_sample() {  // one replay of graph_batch launches: per-launch time
    flush_l2();
    CIQ_CUDA(cudaEventRecord(start_, stream_));
    CIQ_CUDA(cudaGraphLaunch(graph_exec_, stream_));
    CIQ_CUDA(cudaEventRecord(stop_, stream_));
    return elapsed_ms() / report_.graph_batch;
  }

  void warm_up() {  // >= 1 launch (module load/JIT happens here) and >= warmup_ms of launches
    auto begin = std::chrono::steady_clock::now();
    do {
      poison(0xFF);
      launch_checked();
      CIQ_CUDA(cudaStreamSynchronize(stream_));
    } while (seconds_since(begin) * 1e3 < options_.warmup_ms);
  }

  void mark(const char* phase) {  // the time since the previous mark (the first: since the process started)
    auto now = std::chrono::steady_clock::now();
    report_.phases_ms.emplace_back(phase, std::chrono::duration<double, std::milli>(now - last_mark_).count());
    last_mark_ = now;
  }

  static double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  }

  bool enough(const detail::Series& s, double gpu_ms) const {
    int n = static_cast<int>(s.ms.size());
    if (options_.max_samples > 0 && n >= options_.max_samples) return true;
    if (n < options_.samples) return false;
    return gpu_ms >= options_.min_time_ms || detail::relative_stdev(s.ms) < 0.005;
  }

  detail::Series collect(double (Harness::*sample)()) {
    detail::Series s;
    auto begin = std::chrono::steady_clock::now();
    double gpu_ms = 0;
    auto floor = report_.sm_clock_default_mhz;
    while (!enough(s, gpu_ms) && seconds_since(begin) < options_.max_time_s) {
      double ms = (this->*sample)();
      auto clock = nvml_->sm_clock();
      if (floor && clock && *clock < 0.75 * *floor) { ++s.dropped; continue; }
      s.ms.push_back(ms);
      if (clock) s.clocks.push_back(*clock);
      gpu_ms += ms;
    }
    return s;
  }

  void build_graph(double launch_ms) {  // k launches per replay, a replay of >= ~0.2 ms
    int k = static_cast<int>(std::ceil(0.2 / std::max(launch_ms, 1e-4)));
    report_.graph_batch = std::min(std::max(k, 8), 256);
    cudaGraph_t graph;
    CIQ_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < report_.graph_batch; ++i) launch_(stream_);
    CIQ_CUDA(cudaStreamEndCapture(stream_, &graph));
    CIQ_CUDA(cudaGetLastError());
    CIQ_CUDA(cudaGraphInstantiate(&graph_exec_, graph, 0));
    CIQ_CUDA(cudaGraphDestroy(graph));
    CIQ_CUDA(cudaGraphLaunch(graph_exec_, stream_));  // upload + warm the graph
    CIQ_CUDA(cudaStreamSynchronize(stream_));
  }

  detail::Series time_kernel() {
    std::vector<double> probe;
    for (int i = 0; i < 3; ++i) probe.push_back(single_sample());
    double probe_median = detail::quantile(probe, 0.5);
    if (!options_.graph || probe_median >= 0.010) return collect(&Harness::single_sample);
    build_graph(probe_median);
    report_.event_median_ms = probe_median;
    return collect(&Harness::graph_sample);
  }

  void summarise(const detail::Series& s) {
    report_.samples_ms = s.ms;
    report_.clocks_mhz = s.clocks;
    report_.dropped_low_clock = s.dropped;
    report_.median_ms = detail::quantile(s.ms, 0.5);
    report_.iqr_ms = detail::quantile(s.ms, 0.75) - detail::quantile(s.ms, 0.25);
    report_.min_ms = s.ms.empty() ? NAN : *std::min_element(s.ms.begin(), s.ms.end());
  }

  // Two verification launches: poisoned with 0x5A, then with 0xFF. An element is unwritten when
  // it still holds the poison both times; the device keeps the 0xFF-poisoned launch's output.
  size_t verify_outputs() {
    std::vector<std::vector<unsigned char>> first;
    for (int byte : {0x5A, 0xFF}) {
      poison(byte);
      launch_checked();
      CIQ_CUDA(cudaStreamSynchronize(stream_));
      for (size_t i = 0; i < outputs_.size(); ++i) {
        auto* o = outputs_[i];
        o->result.resize(o->bytes());
        CIQ_CUDA(cudaMemcpy(o->result.data(), o->device, o->bytes(), cudaMemcpyDeviceToHost));
        if (byte == 0x5A) first.push_back(o->result);
      }
    }
    size_t unwritten = 0;
    for (size_t i = 0; i < outputs_.size(); ++i) unwritten += count_unwritten(*outputs_[i], first[i]);
    return unwritten;
  }

  static size_t count_unwritten(const detail::Buffer& o, const std::vector<unsigned char>& other) {
    size_t n = 0;
    for (size_t e = 0; e < o.count; ++e) {
      bool poisoned = true;
      for (size_t b = e * o.element; b < (e + 1) * o.element && poisoned; ++b)
        poisoned = o.result[b] == 0xFF && other[b] == 0x5A;
      n += poisoned;
    }
    return n;
  }

  void describe_outputs() {
    for (auto* o : outputs_)
      report_.outputs.push_back({o->name, o->dtype, o->count, detail::sha256_hex(o->result.data(), o->result.size())});
  }

  void write_dump() {
    if (options_.dump.empty()) return;
    std::ofstream file(options_.dump, std::ios::binary | std::ios::trunc);
    for (auto* o : outputs_) file.write(reinterpret_cast<const char*>(o->result.data()), o->result.size());
    if (!file) detail::fail("cannot write the dump file " + options_.dump);
  }

  void run_reference() {
    report_.check_run = true;
    if (!reference_) detail::fail("--check given but the program declares no h.reference(...)");
    CheckResult r = reference_();
    report_.check_passed = r.passed;
    report_.max_abs_err = r.max_abs_err;
    report_.max_rel_err = r.max_rel_err;
  }

  void check_names() const {
    for (auto& [name, value] : options_.sets) {
      if (read_.count(name)) continue;
      std::string known;
      for (auto& r : read_) known += (known.empty() ? "" : ", ") + r;
      detail::fail("unknown --set name '" + name + "' (this program reads: " + known + ")");
    }
  }

  int run_checked() {
    check_names();
    if (!launch_) detail::fail("no launch function: call h.launch(...) before h.run()");
    if (outputs_.empty()) detail::fail("no outputs declared: declare at least one h.output<T>(...)");
    mark("inputs");  // the program's buffers: generated on the host and copied to the GPU
    warm_up();
    mark("warm_up");
    detail::Series series = time_kernel();
    mark("sampling");
    summarise(series);
    size_t unwritten = 0;
    if (!options_.timing_only) {  // a confirmation block: its build's outputs were verified when it was screened
      unwritten = verify_outputs();
      describe_outputs();
      if (options_.check) run_reference();
      write_dump();
    }
    mark("outputs");  // copied back, hashed, checked against the reference, dumped
    int code = 0;
    report_.status = "ok";
    if (series.ms.empty()) {
      report_.status = "error";
      report_.message = "no sample kept: every sample ran below 75% of the default SM clock";
      code = 1;
    } else if (unwritten) {
      report_.status = "unwritten_output";
      report_.message = std::to_string(unwritten) + " output elements were never written";
      code = 3;
    } else if (report_.check_passed == false) {
      report_.status = "check_failed";
      report_.message = "output differs from the CPU reference";
      code = 2;
    }
    std::printf("%s\n", detail::to_json(report_).c_str());
    std::fflush(stdout);
    return code;
  }

  Options options_;
  detail::Report report_;
  std::unique_ptr<Nvml> nvml_;
  std::vector<std::unique_ptr<detail::Buffer>> buffers_;
  std::vector<detail::Buffer*> inputs_, outputs_;
  std::set<std::string> read_;
  Launch launch_;
  std::function<CheckResult()> reference_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  cudaGraphExec_t graph_exec_ = nullptr;
  void* flush_ = nullptr;
  size_t flush_bytes_ = 0;
  unsigned flush_value_ = 0;
  std::chrono::steady_clock::time_point last_mark_ = detail::process_start;
};

}  // namespace ciq
