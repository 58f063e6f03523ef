// The kern:: functions of the op table (ops/op_table.h) that host and device share, written
// once: the C++ prelude (kernel_prelude.h) includes this file; on the device it follows the CUDA
// prelude (kernel_prelude_cuda.h, which defines NX_KERN_FN as __device__ __forceinline__), as
// text for NVRTC and as an #include in the backend's nvcc-compiled kernels (cuda/kernels). No headers: NVRTC compiles it as
// it is. What differs between host and device (conversions, abs, pow and the transcendentals)
// stays in each prelude.
#pragma once

#ifndef NX_KERN_FN
#define NX_KERN_FN inline
#endif

namespace nexus {
namespace kern {
#ifdef NX_CPU_VARIANT
inline namespace NX_CPU_VARIANT {  // a CPU variant's own copy (base/cpu_variant.h)
#endif

// Defined by each prelude (libm on the host, CUDA's math library on the device).
NX_KERN_FN float fmod_(float x, float y);
NX_KERN_FN double fmod_(double x, double y);
NX_KERN_FN float floor_(float v);
NX_KERN_FN double floor_(double v);
NX_KERN_FN float copysign_(float x, float y);
NX_KERN_FN double copysign_(double x, double y);

// Signed integer arithmetic wraps on overflow, as numpy and torch (INT_MIN + -1, -INT_MIN): it is
// done in the unsigned type of the same width, where wrapping is defined (in the signed type it
// is undefined behaviour). Narrow types widen to unsigned int, so their products cannot overflow
// int by promotion. Floats and bool compute in their own type.
template <class T> struct WrapType {
  using type = T;
};
template <> struct WrapType<signed char> {
  using type = unsigned int;
};
template <> struct WrapType<short> {
  using type = unsigned int;
};
template <> struct WrapType<int> {
  using type = unsigned int;
};
template <> struct WrapType<long> {
  using type = unsigned long;
};
template <> struct WrapType<long long> {
  using type = unsigned long long;
};
template <class T> using wrap_t = typename WrapType<T>::type;

// ---- unary (relu keeps NaN; integers never are) ----------------------------------------------
template <class T> NX_KERN_FN T neg(T v) { return T(wrap_t<T>(0) - wrap_t<T>(v)); }
NX_KERN_FN float neg(float v) { return -v; }  // -0.0f, where 0 - 0.0f would give +0
NX_KERN_FN double neg(double v) { return -v; }
template <class T> NX_KERN_FN T relu(T v) { return v > T(0) ? v : (v != v ? v : T(0)); }
template <class T> NX_KERN_FN T sign(T v) { return T((v > T(0)) - (v < T(0))); }

// Integer power by squaring, wrapping on overflow as numpy and torch do (in unsigned arithmetic,
// so no signed overflow); exact, where a float pow rounds (CUDA's pow(double) is not correctly
// rounded: truncated, an exact power of 3 came out as 2 on an H200). The front end refuses
// negative integer exponents; here they give C's truncation of 1 / x**-y.
template <class T> NX_KERN_FN T ipow(T x, T y) {
  if (y < T(1) && y != T(0)) return x == T(1) ? T(1) : (x == T(-1) ? T((y & T(1)) ? -1 : 1) : T(0));
  unsigned long long base = (unsigned long long)x, r = 1;
  for (unsigned long long e = (unsigned long long)y; e != 0; e >>= 1) {
    if (e & 1) r *= base;
    base *= base;
  }
  return T(r);
}
NX_KERN_FN bool ipow(bool x, bool y) { return x || !y; }

// ---- binary (bool add/mul are or/and, as in eager) ----------------------------------------
template <class T> NX_KERN_FN T add(T x, T y) { return T(wrap_t<T>(x) + wrap_t<T>(y)); }
NX_KERN_FN bool add(bool x, bool y) { return x || y; }
template <class T> NX_KERN_FN T mul(T x, T y) { return T(wrap_t<T>(x) * wrap_t<T>(y)); }
NX_KERN_FN bool mul(bool x, bool y) { return x && y; }
template <class T> NX_KERN_FN T sub(T x, T y) { return T(wrap_t<T>(x) - wrap_t<T>(y)); }
template <class T> NX_KERN_FN T div(T x, T y) { return x / y; }
template <class T> NX_KERN_FN T maximum(T x, T y) { return (x != x || x > y) ? x : y; }
template <class T> NX_KERN_FN T minimum(T x, T y) { return (x != x || x < y) ? x : y; }
template <class T> NX_KERN_FN bool eq(T x, T y) { return x == y; }
template <class T> NX_KERN_FN bool ne(T x, T y) { return x != y; }
template <class T> NX_KERN_FN bool lt(T x, T y) { return x < y; }
template <class T> NX_KERN_FN bool le(T x, T y) { return x <= y; }
template <class T> NX_KERN_FN bool gt(T x, T y) { return x > y; }
template <class T> NX_KERN_FN bool ge(T x, T y) { return x >= y; }
template <class T> NX_KERN_FN T where(bool c, T x, T y) { return c ? x : y; }

// ---- floor division and remainder: Python's // and %, as numpy.floor_divide/remainder and
// torch. The quotient rounds toward -inf; the remainder is x - q*y and takes the divisor's sign.
// Integers: x // 0 and x % 0 give 0 here (the eager front end raises ZeroDivisionError before);
// INT_MIN // -1 wraps to INT_MIN, as numpy. Floats: x // 0 is x / 0 (inf or nan), x % 0 is nan.
template <class T> NX_KERN_FN T floor_divide_int(T x, T y) {
  if (y == T(0)) return T(0);
  if (y == T(-1)) return neg(x);
  const T q = T(x / y);
  return (T(x % y) != T(0) && ((x < T(0)) != (y < T(0)))) ? T(q - T(1)) : q;
}
template <class T> NX_KERN_FN T remainder_int(T x, T y) {
  if (y == T(0) || y == T(-1)) return T(0);
  const T r = T(x % y);
  return (r != T(0) && ((r < T(0)) != (y < T(0)))) ? T(r + y) : r;
}
// The quotient from fmod, rounded to the nearest integer below (CPython's float_floor_div).
template <class F> NX_KERN_FN F floor_divide_float(F x, F y) {
  if (y == F(0)) return x / y;
  const F mod = fmod_(x, y);
  F div = (x - mod) / y;
  if (mod != F(0) && ((y < F(0)) != (mod < F(0)))) div -= F(1);
  if (div == F(0)) return copysign_(F(0), x / y);
  const F down = floor_(div);
  return div - down > F(0.5) ? down + F(1) : down;
}
template <class F> NX_KERN_FN F remainder_float(F x, F y) {
  F mod = fmod_(x, y);
  if (mod == F(0)) return copysign_(F(0), y);
  if ((y < F(0)) != (mod < F(0))) mod += y;
  return mod;
}
NX_KERN_FN int32_t floor_divide(int32_t x, int32_t y) { return floor_divide_int(x, y); }
NX_KERN_FN int64_t floor_divide(int64_t x, int64_t y) { return floor_divide_int(x, y); }
NX_KERN_FN float floor_divide(float x, float y) { return floor_divide_float(x, y); }
NX_KERN_FN double floor_divide(double x, double y) { return floor_divide_float(x, y); }
NX_KERN_FN int32_t remainder_(int32_t x, int32_t y) { return remainder_int(x, y); }
NX_KERN_FN int64_t remainder_(int64_t x, int64_t y) { return remainder_int(x, y); }
NX_KERN_FN float remainder_(float x, float y) { return remainder_float(x, y); }
NX_KERN_FN double remainder_(double x, double y) { return remainder_float(x, y); }
// backward-only (floating T): a gradient g and the forward op's output y
template <class T> NX_KERN_FN T relu_grad(T g, T y) { return y <= T(0) ? T(0) : g; }
template <class T> NX_KERN_FN T tanh_grad(T g, T y) { return g * (T(1) - y * y); }
template <class T> NX_KERN_FN T sigmoid_grad(T g, T y) { return g * (y * (T(1) - y)); }

// ---- reductions: max/min with numpy's NaN propagation ---------------------------------------
template <class T> NX_KERN_FN T pick_max(T acc, T v) { return (v != v || v > acc) ? v : acc; }
template <class T> NX_KERN_FN T pick_min(T acc, T v) { return (v != v || v < acc) ? v : acc; }

#ifdef NX_CPU_VARIANT
}  // namespace NX_CPU_VARIANT
#endif
}  // namespace kern
}  // namespace nexus
