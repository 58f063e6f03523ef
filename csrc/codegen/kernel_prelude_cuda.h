// The device side of the kern:: functions: what kernel_prelude.h defines for the host (conversions,
// abs, pow and the transcendentals), for CUDA, with the same names. One text, two compilers: the
// CUDA backend's kernels (cuda/kernels/*.cu, nvcc) include this file, and the renderer embeds it
// (cmake/EmbedKernelText.cmake, kCudaPreludeText) after kernel_ops.h's text for NVRTC, so eager
// device kernels and fused kernels compute an op with the same function.
// No standard headers: NVRTC compiles the text as it is (the renderer defines the integer types;
// nvcc users include <cstdint> first). float32 transcendentals use CUDA's math library (results
// agree with the CPU polynomials within a few ulp, not bit for bit); float->int static_cast
// saturates and maps NaN to 0 on the GPU (cvt.rzi), as the CPU's cvt does by hand.
#pragma once

#ifndef NX_KERN_FN
#define NX_KERN_FN __device__ __forceinline__
#endif
#include "codegen/kernel_ops.h"

namespace nexus {
namespace kern {

template <class U, class T> NX_KERN_FN U cvt(T v) { return static_cast<U>(v); }
NX_KERN_FN float h2f(uint16_t h) {
  uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1fu) return __uint_as_float(s | 0x7f800000u | (m << 13));
  if (e == 0) {
    float f = (float)m * 5.9604644775390625e-8f;
    return s ? -f : f;
  }
  return __uint_as_float(s | ((e + 112u) << 23) | (m << 13));
}
NX_KERN_FN uint16_t f2h(float f) {
  uint32_t u = __float_as_uint(f), s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(s | 0x7e00u);
  if (a >= 0x477ff000u) return (uint16_t)(s | 0x7c00u);
  if (a < 0x38800000u) {  // subnormal half: round |f| * 2^24 to an integer, nearest even
    return (uint16_t)(s | (uint32_t)__float2int_rn(__uint_as_float(a) * 16777216.0f));
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u;
  return (uint16_t)(s | (r >> 13));
}
NX_KERN_FN float b2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
NX_KERN_FN uint16_t f2b(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
NX_KERN_FN float round_f16(float v) { return h2f(f2h(v)); }
NX_KERN_FN float round_bf16(float v) { return b2f(f2b(v)); }

// clang-format off
template <class T> NX_KERN_FN T abs_(T v) { return v < 0 ? neg(v) : v; }  // abs(INT_MIN) = INT_MIN
NX_KERN_FN float abs_(float v) { return fabsf(v); }    NX_KERN_FN double abs_(double v) { return fabs(v); }
NX_KERN_FN float sqrt_(float v) { return sqrtf(v); }   NX_KERN_FN double sqrt_(double v) { return sqrt(v); }
NX_KERN_FN float exp_(float v) { return expf(v); }     NX_KERN_FN double exp_(double v) { return exp(v); }
NX_KERN_FN float log_(float v) { return logf(v); }     NX_KERN_FN double log_(double v) { return log(v); }
NX_KERN_FN float tanh_(float v) { return tanhf(v); }   NX_KERN_FN double tanh_(double v) { return tanh(v); }
NX_KERN_FN float sin_(float v) { return sinf(v); }     NX_KERN_FN double sin_(double v) { return sin(v); }
NX_KERN_FN float cos_(float v) { return cosf(v); }     NX_KERN_FN double cos_(double v) { return cos(v); }
NX_KERN_FN float erf_(float v) { return erff(v); }     NX_KERN_FN double erf_(double v) { return erf(v); }
// clang-format on
NX_KERN_FN float sigmoid(float v) {
  float e = expf(-fabsf(v));
  return (v < 0 ? e : 1.0f) / (1.0f + e);
}
NX_KERN_FN double sigmoid(double v) { return 1.0 / (1.0 + exp(-v)); }
NX_KERN_FN float gelu(float x) { return x * sigmoid(1.5957691216057308f * (x + 0.044715f * x * x * x)); }
NX_KERN_FN double gelu(double x) { return x / (1.0 + exp(-1.5957691216057308 * (x + 0.044715 * x * x * x))); }
template <class T> NX_KERN_FN T gelu_grad(T x) {
  T u = (T)1.5957691216057308 * (x + (T)0.044715 * x * x * x);
  T du = (T)1.5957691216057308 * ((T)1 + (T)(3 * 0.044715) * x * x);
  T s = sigmoid(u);
  return s + x * du * s * ((T)1 - s);
}
NX_KERN_FN float fmod_(float x, float y) { return fmodf(x, y); }
NX_KERN_FN double fmod_(double x, double y) { return fmod(x, y); }
NX_KERN_FN float floor_(float v) { return floorf(v); }
NX_KERN_FN double floor_(double v) { return floor(v); }
NX_KERN_FN float copysign_(float x, float y) { return copysignf(x, y); }
NX_KERN_FN double copysign_(double x, double y) { return copysign(x, y); }
NX_KERN_FN float pow_(float x, float y) { return powf(x, y); }
NX_KERN_FN double pow_(double x, double y) { return pow(x, y); }
template <class T> NX_KERN_FN T pow_(T x, T y) { return ipow(x, y); }  // integers and bool

}  // namespace kern
}  // namespace nexus
