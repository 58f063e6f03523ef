// The elementwise kernel template: out = f(operands...) over a grid-stride loop, with a
// contiguous fast path, one for flat operands (contiguous or a broadcast scalar: `t * 1.7`), and
// 64-bit strided indexing otherwise. unary.cu and binary.cu instantiate
// it with one functor per op-table row.
#pragma once

#include "kernels/common.cuh"

namespace nexus::cuda {

// Op applied to the N-1 inputs of g (operand 0 is the output); R the output's type, T the inputs'.
template <class R, class T, int N, class Op> __global__ void elementwise_kernel(Operands<N> g, int64_t n, Op op) {
  R* out = static_cast<R*>(g.ptr[0]);
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g.contiguous) {
    for (int64_t i = first; i < n; i += step) {
      if constexpr (N == 2) out[i] = op(static_cast<const T*>(g.ptr[1])[i]);
      else out[i] = op(static_cast<const T*>(g.ptr[1])[i], static_cast<const T*>(g.ptr[2])[i]);
    }
    return;
  }
  if (g.flat) {  // no divisions: an input's element i is at i (contiguous) or 0 (a scalar)
    const int64_t s1 = g.stride[1][0], s2 = g.stride[N - 1][0];
    for (int64_t i = first; i < n; i += step) {
      if constexpr (N == 2) out[i] = op(static_cast<const T*>(g.ptr[1])[i * s1]);
      else out[i] = op(static_cast<const T*>(g.ptr[1])[i * s1], static_cast<const T*>(g.ptr[2])[i * s2]);
    }
    return;
  }
  for (int64_t i = first; i < n; i += step) {
    int64_t off[N];
    g.offsets(i, off);
    if constexpr (N == 2) out[off[0]] = op(static_cast<const T*>(g.ptr[1])[off[1]]);
    else out[off[0]] = op(static_cast<const T*>(g.ptr[1])[off[1]], static_cast<const T*>(g.ptr[2])[off[2]]);
  }
}

template <class R, class T, int N, class Op>
void launch_elementwise(const Operands<N>& g, int64_t n, cudaStream_t stream, Op op) {
  if (n == 0) return;
  elementwise_kernel<R, T, N, Op><<<grid_for(n), kThreads, 0, stream>>>(g, n, op);
}

}  // namespace nexus::cuda
