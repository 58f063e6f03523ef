// Elementwise loops. Each op is its kern:: function (codegen/kernel_dispatch.h); StridedLoop
// supplies rows and the loops below specialise the contiguous and scalar-broadcast cases so the
// compiler vectorises them.
#include <cmath>
#include <limits>

#include "ops/cpu/kernels.h"
#include "ops/cpu/loops.h"
#include "codegen/kernel_dispatch.h"  // the op table's kern:: functions, shared with fused kernels

namespace nexus::ops::cpu::NX_CPU_VARIANT {
namespace {

struct Half {
  uint16_t bits;
};
struct BHalf {
  uint16_t bits;
};

template <class T> double to_double(T v) { return static_cast<double>(v); }
template <> double to_double(Half v) { return fp16_to_float(v.bits); }
template <> double to_double(BHalf v) { return bf16_to_float(v.bits); }

template <class U> U from_double(double v) {
  if constexpr (std::is_same_v<U, bool>) {
    return v != 0;
  } else if constexpr (std::is_integral_v<U>) {
    // NaN -> 0 and saturation keep float -> int conversion defined.
    if (std::isnan(v)) return 0;
    if (v >= double(std::numeric_limits<U>::max())) return std::numeric_limits<U>::max();
    if (v <= double(std::numeric_limits<U>::min())) return std::numeric_limits<U>::min();
    return static_cast<U>(v);
  } else {
    return static_cast<U>(v);
  }
}
template <> Half from_double(double v) { return {float_to_fp16(float(v))}; }
template <> BHalf from_double(double v) { return {float_to_bf16(float(v))}; }

template <class Fn> void dispatch_storage(DType t, Fn&& fn) {
  switch (t) {
    case DType::Float32: return fn(float{});
    case DType::Float64: return fn(double{});
    case DType::Float16: return fn(Half{});
    case DType::BFloat16: return fn(BHalf{});
    case DType::Int32: return fn(int32_t{});
    case DType::Int64: return fn(int64_t{});
    case DType::Bool: return fn(bool{});
  }
}

template <class U, class T> U convert(T v) {
  if constexpr (std::is_same_v<U, T>) return v;
  else if constexpr (std::is_same_v<T, float> && std::is_same_v<U, Half>) return {float_to_fp16(v)};
  else if constexpr (std::is_same_v<T, float> && std::is_same_v<U, BHalf>) return {float_to_bf16(v)};
  else if constexpr (std::is_same_v<T, Half> && std::is_same_v<U, float>) return fp16_to_float(v.bits);
  else if constexpr (std::is_same_v<T, BHalf> && std::is_same_v<U, float>) return bf16_to_float(v.bits);
  else if constexpr (std::is_arithmetic_v<T> && std::is_floating_point_v<U>) return static_cast<U>(v);
  else return from_double<U>(to_double(v));
}

// out[i] = f(x[i]) with byte strides s.
template <class R, class A, class F> inline void unary_loop(char** p, const int64_t* s, int64_t n, F f) {
  R* o = reinterpret_cast<R*>(p[0]);
  const A* a = reinterpret_cast<const A*>(p[1]);
  if (s[0] == sizeof(R) && s[1] == sizeof(A)) {
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i]);
  } else {
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<R*>(p[0] + i * s[0]) = f(*reinterpret_cast<const A*>(p[1] + i * s[1]));
  }
}

template <class R, class A, class F> inline void binary_loop(char** p, const int64_t* s, int64_t n, F f) {
  R* o = reinterpret_cast<R*>(p[0]);
  const A* a = reinterpret_cast<const A*>(p[1]);
  const A* b = reinterpret_cast<const A*>(p[2]);
  if (s[0] == sizeof(R) && s[1] == sizeof(A) && s[2] == sizeof(A)) {
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
  } else if (s[0] == sizeof(R) && s[1] == sizeof(A) && s[2] == 0) {
    const A bv = *b;
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], bv);
  } else if (s[0] == sizeof(R) && s[1] == 0 && s[2] == sizeof(A)) {
    const A av = *a;
    for (int64_t i = 0; i < n; ++i) o[i] = f(av, b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<R*>(p[0] + i * s[0]) =
          f(*reinterpret_cast<const A*>(p[1] + i * s[1]), *reinterpret_cast<const A*>(p[2] + i * s[2]));
  }
}

template <class T, class F> void run_unary(const Tensor& out, const Tensor& x, F f) {
  StridedLoop<2>(out.shape(), {&out, &x}).run([&](char** p, const int64_t* s, int64_t n) {
    unary_loop<T, T>(p, s, n, f);
  });
}

template <class R, class T, class F> void run_binary(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  StridedLoop<3>(out.shape(), {&out, &a, &b}).run([&](char** p, const int64_t* s, int64_t n) {
    binary_loop<R, T>(p, s, n, f);
  });
}

// The scalar math is the op's kern:: function (float32 transcendentals: vec_math's polynomials,
// float64: libm, integers: the integer rule), inlined into the loops above.
template <class T> void unary_typed(UnaryOp op, const Tensor& out, const Tensor& x) {
  kern::with_unary<T>(op, [&](auto f) { run_unary<T>(out, x, f); });
}

template <class T> void binary_typed(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  kern::with_binary<T>(op, [&](auto f) { run_binary<decltype(f(T{}, T{})), T>(out, a, b, f); });
}

}  // namespace

static void cast_kernel(const Tensor& dst, const Tensor& src) {
  dispatch_storage(dst.dtype(), [&](auto u) {
    using U = decltype(u);
    dispatch_storage(src.dtype(), [&](auto t) {
      using T = decltype(t);
      StridedLoop<2>(dst.shape(), {&dst, &src}).run([](char** p, const int64_t* s, int64_t n) {
        unary_loop<U, T>(p, s, n, [](T v) { return convert<U, T>(v); });
      });
    });
  });
}

static void fill_kernel(const Tensor& out, double value) {
  dispatch_storage(out.dtype(), [&](auto u) {
    using U = decltype(u);
    const U v = from_double<U>(value);
    StridedLoop<1>(out.shape(), {&out}).run([v](char** p, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) *reinterpret_cast<U*>(p[0] + i * s[0]) = v;
    });
  });
}

static void unary_kernel(UnaryOp op, const Tensor& out, const Tensor& x) {
  dispatch_compute(x.dtype(), op_name(op), [&](auto t) { unary_typed<decltype(t)>(op, out, x); });
}

static void binary_kernel(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch_compute(a.dtype(), op_name(op), [&](auto t) { binary_typed<decltype(t)>(op, out, a, b); });
}

static void where_kernel(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  dispatch_compute(a.dtype(), "where", [&](auto t) {
    using T = decltype(t);
    StridedLoop<4>(out.shape(), {&out, &cond, &a, &b}).run([](char** p, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<T*>(p[0] + i * s[0]) = *reinterpret_cast<const bool*>(p[1] + i * s[1])
                                                     ? *reinterpret_cast<const T*>(p[2] + i * s[2])
                                                     : *reinterpret_cast<const T*>(p[3] + i * s[3]);
    });
  });
}

void add_elementwise(Kernels& k) {
  k.cast = cast_kernel;
  k.fill = fill_kernel;
  k.unary = unary_kernel;
  k.binary = binary_kernel;
  k.where = where_kernel;
}

}  // namespace nexus::ops::cpu::NX_CPU_VARIANT
