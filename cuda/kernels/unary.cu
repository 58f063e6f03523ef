// Unary ops and where on the device: one functor per row of NX_UNARY_OPS calling the row's
// kern:: function (the same one the CPU kernels, the interpreter and fused kernels call), for
// each compute dtype its domain allows.
#include "kernels/elementwise.cuh"

namespace nexus::cuda {
namespace {

#define NX_FUNCTOR(Enum, fn, name, domain, result, role)                          \
  struct Unary##Enum {                                                            \
    template <class T> __device__ T operator()(T v) const { return kern::fn(v); } \
  };
NX_UNARY_OPS(NX_FUNCTOR)
#undef NX_FUNCTOR

template <class T> void unary_typed(ops::UnaryOp op, const Operands<2>& g, int64_t n, cudaStream_t stream) {
  switch (op) {
#define NX_CASE(Enum, fn, name, domain, result, role)           \
  case ops::UnaryOp::Enum:                                      \
    if constexpr (computes_in<T>(ops::OpDomain::domain)) {      \
      launch_elementwise<T, T, 2>(g, n, stream, Unary##Enum{}); \
      return;                                                   \
    }                                                           \
    break;
    NX_UNARY_OPS(NX_CASE)
#undef NX_CASE
  }
  throw InternalError(str("internal error, please report: CUDA ", ops::op_name(op), " reached a kernel with ",
                          dtype_name(DTypeOf<T>::value), " operands"));
}

// out = cond ? a : b, operands (out, cond, a, b).
template <class T> __global__ void where_kernel(Operands<4> g, int64_t n) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  T* out = static_cast<T*>(g.ptr[0]);
  const bool* cond = static_cast<const bool*>(g.ptr[1]);
  const T* a = static_cast<const T*>(g.ptr[2]);
  const T* b = static_cast<const T*>(g.ptr[3]);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    if (g.contiguous) {
      out[i] = kern::where(cond[i], a[i], b[i]);
    } else if (g.flat) {
      out[i] = kern::where(cond[i * g.stride[1][0]], a[i * g.stride[2][0]], b[i * g.stride[3][0]]);
    } else {
      int64_t off[4];
      g.offsets(i, off);
      out[off[0]] = kern::where(cond[off[1]], a[off[2]], b[off[3]]);
    }
  }
}

}  // namespace

void launch_unary(ops::UnaryOp op, DType t, const Operands<2>& g, int64_t n, cudaStream_t stream) {
  dispatch_compute(t, ops::op_name(op), [&](auto v) { unary_typed<decltype(v)>(op, g, n, stream); });
  check_launch(ops::op_name(op).data());
}

void launch_where(DType t, const Operands<4>& g, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_compute(t, "where", [&](auto v) { where_kernel<decltype(v)><<<grid_for(n), kThreads, 0, stream>>>(g, n); });
  check_launch("where");
}

}  // namespace nexus::cuda
