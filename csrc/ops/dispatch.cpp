#include "ops/dispatch.h"

#include "device/backend.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/reduce_kernel.h"

namespace nexus::ops {
namespace kernel {

void cast(const Tensor& dst, const Tensor& src) {
  if (dst.device().is_cpu()) cpu::cast_kernel(dst, src);
  else device::backend(dst.device()).cast(dst, src);
}

void fill(const Tensor& out, double value) {
  if (out.device().is_cpu()) cpu::fill_kernel(out, value);
  else device::backend(out.device()).fill(out, value);
}

void unary(UnaryOp op, const Tensor& out, const Tensor& x) {
  if (out.device().is_cpu()) cpu::unary_kernel(op, out, x);
  else device::backend(out.device()).unary(op, out, x);
}

void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  if (out.device().is_cpu()) cpu::binary_kernel(op, out, a, b);
  else device::backend(out.device()).binary(op, out, a, b);
}

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  if (out.device().is_cpu()) cpu::where_kernel(out, cond, a, b);
  else device::backend(out.device()).where(out, cond, a, b);
}

void reduce(ReduceOp op, const Tensor& out, const Tensor& x, const std::vector<int64_t>& axes) {
  if (out.device().is_cpu()) cpu::reduce_kernel(op, out, x, axes);
  else device::backend(out.device()).reduce(op, out, x, axes);
}

void argmax(const Tensor& out, const Tensor& x, int64_t rows, int64_t n) {
  if (out.device().is_cpu()) cpu::argmax_kernel(out, x, rows, n);
  else device::backend(out.device()).argmax(out, x, rows, n);
}

}  // namespace kernel

Device common_device(const char* op, std::initializer_list<Tensor> operands) {
  const Tensor* first = nullptr;  // the first operand that decides (not a 0-d host scalar)
  for (const Tensor& t : operands) {
    if (!t.defined() || (t.ndim() == 0 && t.device().is_cpu())) continue;
    if (!first) first = &t;
    else if (t.device() != first->device())
      throw ValueError(str(op, ": expected all tensors on one device, but found ", first->device().str(), " and ",
                           t.device().str(), "; move them with .to(device) first"));
  }
  return first ? first->device() : Device::cpu();
}

void require_host(const char* op, std::initializer_list<Tensor> operands) {
  for (const Tensor& t : operands)
    if (t.defined() && !t.device().is_cpu())
      throw NotImplementedError(
          str(op, ": not implemented for ", t.device().str(), " tensors yet; move them to the host with .cpu() first"));
}

}  // namespace nexus::ops
