// Creation ops and the seeded generator. The generator is counter-based (splitmix64 of
// seed + counter), so a stream does not depend on the thread count: element i of a call draws
// from counter (offset + i), and each call advances the offset.
#include <atomic>
#include <cmath>
#include <mutex>

#include "base/thread_pool.h"
#include "ops/cpu/kernels.h"
#include "ops/internal.h"

namespace nexus::ops {
namespace {

std::mutex g_rng_mutex;
uint64_t g_seed = 0x6e65787573ull;  // "nexus"
uint64_t g_offset = 0;

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Reserves `n` counters of the global stream; returns (key, first counter).
std::pair<uint64_t, uint64_t> reserve(uint64_t n) {
  std::lock_guard<std::mutex> lock(g_rng_mutex);
  uint64_t first = g_offset;
  g_offset += n;
  return {splitmix64(g_seed), first};
}

inline double uniform01(uint64_t key, uint64_t counter) {  // [0, 1), 53 bits
  return double(splitmix64(key ^ splitmix64(counter)) >> 11) * 0x1.0p-53;
}

template <class Fill>
Tensor generate(const Shape& shape, DType dtype, const char* op, uint64_t per_element, Fill fill) {
  NX_CHECK_TYPE(is_floating(dtype), op, ": dtype must be floating point, got ", dtype_name(dtype));
  Tensor out = Tensor::empty(shape, DType::Float64);
  auto [key, first] = reserve(uint64_t(out.numel()) * per_element);
  double* p = out.data<double>();
  parallel_for(out.numel(), 1 << 14, [&, key = key, first = first](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) p[i] = fill(key, first + uint64_t(i) * per_element);
  });
  return cast(out, dtype);
}

}  // namespace

void manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(g_rng_mutex);
  g_seed = seed;
  g_offset = 0;
}

Tensor rand(const Shape& shape, DType dtype) {
  return generate(shape, dtype, "rand", 1, [](uint64_t key, uint64_t c) { return uniform01(key, c); });
}

Tensor randn(const Shape& shape, DType dtype) {
  return generate(shape, dtype, "randn", 2, [](uint64_t key, uint64_t c) {
    double u1 = 1.0 - uniform01(key, c);  // (0, 1]
    double u2 = uniform01(key, c + 1);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  });
}

Tensor arange(double start, double stop, double step, DType dtype) {
  NX_CHECK(step != 0, "arange: step must not be zero");
  double span = std::ceil((stop - start) / step);
  NX_CHECK(std::isfinite(span), "arange: start, stop and step must be finite");
  int64_t n = std::max<int64_t>(0, int64_t(span));
  Tensor out = Tensor::empty({n}, DType::Float64);
  double* p = out.data<double>();
  for (int64_t i = 0; i < n; ++i) p[i] = start + double(i) * step;
  return cast(out, dtype);
}

}  // namespace nexus::ops
