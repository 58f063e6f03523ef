// The scalar semantics of every op and fused-kernel instruction, in one place: the eager kernels
// (ops/cpu/elementwise_kernel.cpp) and the interpreter (interp.cpp) call these functions through
// kernel_dispatch.h, and the C++ renderer embeds this file's text (with vec_math.h and half.h)
// at the top of each generated source, so every path computes the same bits. Standard headers
// only. float32 transcendentals use vec_math's polynomials, float64 uses libm, integers the
// integer rule, float->int conversion saturates and maps NaN to 0.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "codegen/kernel_ops.h"
#include "ops/cpu/vec_math.h"
#include "tensor/half.h"

namespace nexus::kern {
#ifdef NX_CPU_VARIANT
inline namespace NX_CPU_VARIANT {  // a CPU variant's own copy (base/cpu_variant.h)
#endif

// ---- conversions: U from T (T, U in float, double, int32_t, int64_t, bool) -----------------
template <class U, class T> inline U cvt(T v) {
  if constexpr (std::is_same_v<U, T>) {
    return v;
  } else if constexpr (std::is_same_v<U, bool>) {
    return v != T(0);
  } else if constexpr (std::is_floating_point_v<U>) {
    return static_cast<U>(v);
  } else {  // integral U from another type, through double, saturating (NaN -> 0)
    const double d = static_cast<double>(v);
    if (d != d) return 0;
    if (d >= double(std::numeric_limits<U>::max())) return std::numeric_limits<U>::max();
    if (d <= double(std::numeric_limits<U>::min())) return std::numeric_limits<U>::min();
    return static_cast<U>(d);
  }
}
// Half-precision registers hold floats that are representable in the half type.
inline float round_f16(float v) { return nexus::fp16_to_float(nexus::float_to_fp16(v)); }
inline float round_bf16(float v) { return nexus::bf16_to_float(nexus::float_to_bf16(v)); }

// ---- unary (neg, relu, sign and the binary ops: kernel_ops.h) --------------------------------
template <class T> inline T abs_(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::fabs(v);
  else return v < 0 ? neg(v) : v;  // abs(INT_MIN) wraps to INT_MIN, as numpy
}
inline float sqrt_(float v) { return std::sqrt(v); }
inline double sqrt_(double v) { return std::sqrt(v); }
inline float exp_(float v) { return nexus::ops::vec::exp(v); }
inline double exp_(double v) { return std::exp(v); }
inline float log_(float v) { return nexus::ops::vec::log(v); }
inline double log_(double v) { return std::log(v); }
inline float tanh_(float v) { return nexus::ops::vec::tanh(v); }
inline double tanh_(double v) { return std::tanh(v); }
inline float sigmoid(float v) { return nexus::ops::vec::sigmoid(v); }
inline double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }
inline float gelu(float v) { return nexus::ops::vec::gelu(v); }
inline double gelu(double v) { return nexus::ops::vec::gelu(v); }
inline float gelu_grad(float v) { return nexus::ops::vec::gelu_grad(v); }
inline double gelu_grad(double v) { return nexus::ops::vec::gelu_grad(v); }
inline float erf_(float v) { return nexus::ops::vec::erf(v); }
inline double erf_(double v) { return std::erf(v); }
inline float sin_(float v) { return nexus::ops::vec::sin(v); }
inline double sin_(double v) { return std::sin(v); }
inline float cos_(float v) { return nexus::ops::vec::cos(v); }
inline double cos_(double v) { return std::cos(v); }

// ---- binary: the rest are in kernel_ops.h ---------------------------------------------------
inline float fmod_(float x, float y) { return std::fmod(x, y); }
inline double fmod_(double x, double y) { return std::fmod(x, y); }
inline float floor_(float v) { return std::floor(v); }
inline double floor_(double v) { return std::floor(v); }
inline float copysign_(float x, float y) { return std::copysign(x, y); }
inline double copysign_(double x, double y) { return std::copysign(x, y); }
template <class T> inline T pow_(T x, T y) {
  if constexpr (std::is_integral_v<T>) return ipow(x, y);
  else return std::pow(x, y);
}
// Reductions run over chunks of kChunk elements (fixed, so results do not depend on threads).
// Float sums add kLanes lanes in double over the chunk (each value widened: a float lane adding
// thousands of same-signed values would lose ~1e-5 of their sum, which a batch norm's backward
// turns into a per-channel offset), then the lanes in order.
inline constexpr int64_t kChunk = 4096;
inline constexpr int64_t kLanes = 16;
inline constexpr int64_t kSumTile = 256;  // a float sum's values are computed a tile at a time

#ifdef NX_CPU_VARIANT
}  // namespace NX_CPU_VARIANT
#endif
}  // namespace nexus::kern
