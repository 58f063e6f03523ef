// From Tensors to the kernels' plain operand descriptions (geometry.h): dimensions of size 1
// dropped, neighbours merged where every operand is contiguous across them (as the CPU's
// StridedLoop does), innermost first. Host code only.
#pragma once

#include <array>
#include <vector>

#include "geometry.h"
#include "tensor/tensor.h"

namespace nexus::cuda {

// ValueError naming `what` and the shape when more than kMaxDims dimensions remain after merging.
template <int N>
Operands<N> make_operands(const Shape& shape, const std::array<const Tensor*, N>& ts, const char* what) {
  Operands<N> g{};
  std::vector<int64_t> sh;  // outermost first while building
  std::array<std::vector<int64_t>, N> st;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !sh.empty();
    for (int k = 0; k < N && merge; ++k) merge = st[k].back() == ts[k]->strides()[d] * shape[d];
    if (merge) {
      sh.back() *= shape[d];
      for (int k = 0; k < N; ++k) st[k].back() = ts[k]->strides()[d];
    } else {
      sh.push_back(shape[d]);
      for (int k = 0; k < N; ++k) st[k].push_back(ts[k]->strides()[d]);
    }
  }
  NX_CHECK(sh.size() <= size_t(kMaxDims), what, " on CUDA: shape ", shape_str(shape), " has ", sh.size(),
           " dimensions that cannot be merged; at most ", kMaxDims, " are supported (make the operands contiguous)");
  g.ndim = int(sh.size());
  g.contiguous = g.flat = true;
  for (int k = 0; k < N; ++k) {
    g.ptr[k] = ts[k]->raw_data();
    for (int d = 0; d < g.ndim; ++d) g.stride[k][d] = st[k][size_t(g.ndim - 1 - d)];
    const int64_t s = g.ndim == 1 ? g.stride[k][0] : 0;  // 0-d: one element, every stride 0
    g.contiguous = g.contiguous && (g.ndim == 0 || s == 1);
    g.flat = g.flat && (g.ndim == 0 || s == 1 || (k > 0 && s == 0));
  }
  for (int d = 0; d < g.ndim; ++d) g.shape[d] = sh[size_t(g.ndim - 1 - d)];
  return g;
}

}  // namespace nexus::cuda
