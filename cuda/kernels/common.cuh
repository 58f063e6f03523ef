// What every kernel file includes: the op table's kern:: functions for the device (kernel_ops.h
// through kernel_prelude_cuda.h: one definition per op, the same text NVRTC compiles), the
// operand descriptions, and the storage and register types of each dtype.
#pragma once

#include <cstdint>

#include "codegen/kernel_prelude_cuda.h"
#include "kernels/kernels.h"

namespace nexus::cuda {

// Storage type in memory and register type in arithmetic (halves compute in float).
template <DType D> struct Elem;
template <> struct Elem<DType::Float32> {
  using type = float;
  using reg = float;
};
template <> struct Elem<DType::Float64> {
  using type = double;
  using reg = double;
};
template <> struct Elem<DType::Float16> {
  using type = uint16_t;
  using reg = float;
};
template <> struct Elem<DType::BFloat16> {
  using type = uint16_t;
  using reg = float;
};
template <> struct Elem<DType::Int32> {
  using type = int32_t;
  using reg = int32_t;
};
template <> struct Elem<DType::Int64> {
  using type = int64_t;
  using reg = int64_t;
};
template <> struct Elem<DType::Bool> {
  using type = bool;
  using reg = bool;
};

// Whether registers of type T hold an op's operands (its front end converts them there), as
// kern::computes_in on the host (codegen/kernel_dispatch.h, which nvcc cannot include beside
// the device prelude).
template <class T> constexpr bool computes_in(ops::OpDomain d) {
  constexpr DType t = DTypeOf<T>::value;
  return ops::accepts(d, t) && ops::operand_dtype(d, t) == t;
}

// Blocks for a grid-stride loop over n (n > 0).
inline unsigned grid_for(int64_t n) { return unsigned(launch_geometry(n).blocks); }

}  // namespace nexus::cuda
