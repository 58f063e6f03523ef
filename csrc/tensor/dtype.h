// Element types. float16 and bfloat16 are storage types: kernels compute them in float32 and round
// the result back (round to nearest even).
#pragma once

#include <bit>
#include <cstdint>
#include <string_view>

#include "base/error.h"
#include "tensor/half.h"

namespace nexus {

enum class DType : uint8_t { Float32, Float64, Float16, BFloat16, Int32, Int64, Bool };
inline constexpr int kNumDTypes = 7;

constexpr int64_t itemsize(DType t) {
  switch (t) {
    case DType::Float64:
    case DType::Int64: return 8;
    case DType::Float32:
    case DType::Int32: return 4;
    case DType::Float16:
    case DType::BFloat16: return 2;
    case DType::Bool: return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::Bool: return "bool";
  }
  return "?";
}

constexpr bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}
constexpr bool is_half(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

// The type a kernel computes in: halves compute in float32, everything else in itself.
constexpr DType compute_dtype(DType t) { return is_half(t) ? DType::Float32 : t; }

// Promotion for binary ops: bool < int32 < int64 < {float16, bfloat16} < float32 < float64.
DType promote_types(DType a, DType b);

// Maps a C++ type to its DType (for templated kernels).
template <class T> struct DTypeOf;
template <> struct DTypeOf<float> {
  static constexpr DType value = DType::Float32;
};
template <> struct DTypeOf<double> {
  static constexpr DType value = DType::Float64;
};
template <> struct DTypeOf<int32_t> {
  static constexpr DType value = DType::Int32;
};
template <> struct DTypeOf<int64_t> {
  static constexpr DType value = DType::Int64;
};
template <> struct DTypeOf<bool> {
  static constexpr DType value = DType::Bool;
};

// Calls fn(T{}) with T the C++ type of a compute dtype (no halves: convert those first).
template <class Fn> decltype(auto) dispatch_compute(DType t, std::string_view op, Fn&& fn) {
  switch (t) {
    case DType::Float32: return fn(float{});
    case DType::Float64: return fn(double{});
    case DType::Int32: return fn(int32_t{});
    case DType::Int64: return fn(int64_t{});
    case DType::Bool: return fn(bool{});
    default: break;
  }
  throw InternalError(str("internal error, please report: ", op, ": no kernel for ", dtype_name(t)));
}

template <class Fn> decltype(auto) dispatch_float(DType t, std::string_view op, Fn&& fn) {
  switch (t) {
    case DType::Float32: return fn(float{});
    case DType::Float64: return fn(double{});
    default: break;
  }
  throw TypeError(str(op, ": expected a floating-point tensor, got ", dtype_name(t)));
}

}  // namespace nexus
