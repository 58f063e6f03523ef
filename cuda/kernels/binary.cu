// Binary ops on the device: one functor per row of NX_BINARY_OPS calling the row's kern::
// function, for each compute dtype its domain allows; comparisons write bool.
#include "kernels/elementwise.cuh"

namespace nexus::cuda {
namespace {

#define NX_FUNCTOR(Enum, fn, name, domain, result, role)                                     \
  struct Binary##Enum {                                                                      \
    template <class T> __device__ auto operator()(T x, T y) const { return kern::fn(x, y); } \
  };
NX_BINARY_OPS(NX_FUNCTOR)
#undef NX_FUNCTOR

template <class T> void binary_typed(ops::BinaryOp op, const Operands<3>& g, int64_t n, cudaStream_t stream) {
  switch (op) {
#define NX_CASE(Enum, fn, name, domain, result, role)                                      \
  case ops::BinaryOp::Enum:                                                                \
    if constexpr (computes_in<T>(ops::OpDomain::domain)) {                                 \
      using R = std::conditional_t<ops::OpResult::result == ops::OpResult::Bool, bool, T>; \
      launch_elementwise<R, T, 3>(g, n, stream, Binary##Enum{});                           \
      return;                                                                              \
    }                                                                                      \
    break;
    NX_BINARY_OPS(NX_CASE)
#undef NX_CASE
  }
  throw InternalError(str("internal error, please report: CUDA ", ops::op_name(op), " reached a kernel with ",
                          dtype_name(DTypeOf<T>::value), " operands"));
}

}  // namespace

void launch_binary(ops::BinaryOp op, DType t, const Operands<3>& g, int64_t n, cudaStream_t stream) {
  dispatch_compute(t, ops::op_name(op), [&](auto v) { binary_typed<decltype(v)>(op, g, n, stream); });
  check_launch(ops::op_name(op).data());
}

}  // namespace nexus::cuda
