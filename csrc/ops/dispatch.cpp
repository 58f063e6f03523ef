#include "ops/dispatch.h"

#include "base/cpu_variant_dispatch.h"
#include "device/backend.h"
#include "ops/cpu/kernels.h"

namespace nexus::ops {

const cpu::Kernels& cpu::kernels() {
  static const Kernels& table = with_cpu_variant([](auto v) -> const Kernels& { return kernels_for(v); });
  return table;
}

namespace kernel {

void cast(const Tensor& dst, const Tensor& src) {
  if (dst.device().is_cpu()) cpu::kernels().cast(dst, src);
  else device::backend(dst.device()).cast(dst, src);
}

void fill(const Tensor& out, double value) {
  if (out.device().is_cpu()) cpu::kernels().fill(out, value);
  else device::backend(out.device()).fill(out, value);
}

void unary(UnaryOp op, const Tensor& out, const Tensor& x) {
  if (out.device().is_cpu()) cpu::kernels().unary(op, out, x);
  else device::backend(out.device()).unary(op, out, x);
}

void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  if (out.device().is_cpu()) cpu::kernels().binary(op, out, a, b);
  else device::backend(out.device()).binary(op, out, a, b);
}

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  if (out.device().is_cpu()) cpu::kernels().where(out, cond, a, b);
  else device::backend(out.device()).where(out, cond, a, b);
}

void reduce(ReduceOp op, const Tensor& out, const Tensor& x, const std::vector<int64_t>& axes) {
  if (out.device().is_cpu()) cpu::kernels().reduce(op, out, x, axes);
  else device::backend(out.device()).reduce(op, out, x, axes);
}

void argmax(const Tensor& out, const Tensor& x, int64_t rows, int64_t n) {
  if (out.device().is_cpu()) cpu::kernels().argmax(out, x, rows, n);
  else device::backend(out.device()).argmax(out, x, rows, n);
}

void conv2d_forward(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
                    const Tensor& residual, bool relu) {
  if (y.device().is_cpu()) return cpu::kernels().conv2d_forward(g, x, w, bias, y, residual, relu);
  device::backend(y.device()).conv2d_forward(g, x, w, bias, y);
  // a device runs the epilogue as the ops it replaces
  if (residual.defined()) binary(BinaryOp::Add, y, y, residual);
  if (relu) unary(UnaryOp::Relu, y, y);
}

void conv2d_backward(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx,
                     const Tensor& dw, const Tensor& dbias) {
  if (dy.device().is_cpu()) cpu::kernels().conv2d_backward(g, x, w, dy, dx, dw, dbias);
  else device::backend(dy.device()).conv2d_backward(g, x, w, dy, dx, dw, dbias);
}

void max_pool2d_forward(const Pool2dGeometry& g, const Tensor& x, const Tensor& y, const Tensor& argmax) {
  if (y.device().is_cpu()) cpu::kernels().max_pool2d_forward(g, x, y, argmax);
  else device::backend(y.device()).max_pool2d_forward(g, x, y, argmax);
}

void max_pool2d_backward(const Pool2dGeometry& g, const Tensor& dy, const Tensor& argmax, const Tensor& dx) {
  if (dx.device().is_cpu()) cpu::kernels().max_pool2d_backward(g, dy, argmax, dx);
  else device::backend(dx.device()).max_pool2d_backward(g, dy, argmax, dx);
}

void avg_pool2d_forward(const Pool2dGeometry& g, const Tensor& x, const Tensor& y) {
  if (y.device().is_cpu()) cpu::kernels().avg_pool2d_forward(g, x, y);
  else device::backend(y.device()).avg_pool2d_forward(g, x, y);
}

void avg_pool2d_backward(const Pool2dGeometry& g, const Tensor& dy, const Tensor& dx) {
  if (dx.device().is_cpu()) cpu::kernels().avg_pool2d_backward(g, dy, dx);
  else device::backend(dx.device()).avg_pool2d_backward(g, dy, dx);
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

}  // namespace nexus::ops
