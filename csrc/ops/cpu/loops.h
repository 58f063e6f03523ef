// Strided iteration over N operands of one shape (operand 0 is the output). Dimensions that are
// contiguous across all operands are merged, then the innermost dimension becomes a 1-D loop
// `inner(ptrs, byte_strides, n)` that the kernel specialises for contiguous / broadcast cases.
// Rows (or, for 1-D problems, ranges) are split over the thread pool.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "tensor/tensor.h"

namespace nexus::ops::cpu {
#ifdef NX_CPU_VARIANT
inline namespace NX_CPU_VARIANT {  // a CPU variant's own copy (base/cpu_variant.h)
#endif

template <int N> struct StridedLoop {
  std::vector<int64_t> shape;                   // after merging, innermost last
  std::array<std::vector<int64_t>, N> strides;  // bytes
  std::array<char*, N> base;

  // operands[i] must have shape `shape` (broadcast views already applied).
  StridedLoop(const Shape& full_shape, const std::array<const Tensor*, N>& operands) {
    if (numel(full_shape) == 0) {  // nothing to visit; merging the other dims could overflow
      shape = {0};
      for (int k = 0; k < N; ++k) strides[k] = {0};
      return;
    }
    std::array<std::vector<int64_t>, N> st;
    for (int k = 0; k < N; ++k) {
      base[k] = static_cast<char*>(operands[k]->raw_data());
      int64_t isz = itemsize(operands[k]->dtype());
      for (int64_t s : operands[k]->strides()) st[k].push_back(s * isz);
    }
    for (size_t d = 0; d < full_shape.size(); ++d) {
      if (full_shape[d] == 1) continue;
      bool merge = !shape.empty();
      for (int k = 0; k < N && merge; ++k) merge = strides[k].back() == st[k][d] * full_shape[d];
      if (merge) {
        shape.back() *= full_shape[d];
        for (int k = 0; k < N; ++k) strides[k].back() = st[k][d];
      } else {
        shape.push_back(full_shape[d]);
        for (int k = 0; k < N; ++k) strides[k].push_back(st[k][d]);
      }
    }
    if (shape.empty()) {  // a single element
      shape.push_back(1);
      for (int k = 0; k < N; ++k) strides[k].push_back(0);
    }
  }

  template <class Inner> void run(Inner inner, int64_t grain = kElementwiseGrain) const {
    const int64_t n_inner = shape.back();
    const size_t nd = shape.size();
    std::array<int64_t, N> inner_stride;
    for (int k = 0; k < N; ++k) inner_stride[k] = strides[k].back();
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < nd; ++d) rows *= shape[d];
    if (rows * n_inner == 0) return;
    if (rows == 1) {  // one long row: split it
      parallel_for(n_inner, grain, [&](int64_t b, int64_t e) {
        std::array<char*, N> p;
        for (int k = 0; k < N; ++k) p[k] = base[k] + b * inner_stride[k];
        inner(p.data(), inner_stride.data(), e - b);
      });
      return;
    }
    int64_t row_grain = std::max<int64_t>(1, grain / n_inner);
    parallel_for(rows, row_grain, [&](int64_t rb, int64_t re) {
      for (int64_t r = rb; r < re; ++r) {
        std::array<char*, N> p = base;
        int64_t rem = r;
        for (size_t d = nd - 1; d-- > 0;) {
          int64_t i = rem % shape[d];
          rem /= shape[d];
          for (int k = 0; k < N; ++k) p[k] += i * strides[k][d];
        }
        inner(p.data(), inner_stride.data(), n_inner);
      }
    });
  }
};

// The sum of x[0, n) in double: 16 lanes along the run, then the lanes in order and the rest.
// One fixed order (the same result on every call) at streaming speed, where a single chain of
// dependent additions runs at one per add's latency. Float sums and convolutions' bias gradients.
template <class T> double sum_in_lanes(const T* x, int64_t n) {
  constexpr int64_t kLanes = 16;
  double lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) lanes[j] += double(x[i + j]);
  double sum = 0;
  for (int64_t j = 0; j < kLanes; ++j) sum += lanes[j];
  for (; i < n; ++i) sum += double(x[i]);
  return sum;
}

#ifdef NX_CPU_VARIANT
}  // namespace NX_CPU_VARIANT
#endif

// A broadcast view of `t` with shape `shape` (stride 0 on expanded dims). No checks: callers
// have validated the broadcast. (ops/elementwise.cpp; one for all variants: no loop in it.)
Tensor broadcast_view(const Tensor& t, const Shape& shape);

}  // namespace nexus::ops::cpu
