// Elementwise front ends: broadcasting, type promotion, half-precision staging, autograd.
#include <cmath>

#include "device/backend.h"
#include "ops/cpu/loops.h"
#include "ops/derivatives.h"
#include "ops/dispatch.h"
#include "ops/internal.h"

namespace nexus::ops {

Tensor cpu::broadcast_view(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  Strides st(shape.size(), 0);
  size_t off = shape.size() - t.shape().size();
  for (size_t i = 0; i < t.shape().size(); ++i) st[off + i] = t.shape()[i] == 1 ? 0 : t.strides()[i];
  return Tensor::view_of(t.storage(), t.offset(), shape, st, t.dtype());
}

Tensor cast(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  kernel::cast(out, x);
  return out;
}

Tensor astype(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Tensor out = cast(x, dtype);
  if (is_floating(dtype) && is_floating(x.dtype()))
    return autograd::record("astype", out, {x}, grad::astype(x.dtype()));
  return out;
}

Tensor to_device(const Tensor& x, Device device, bool non_blocking) {
  if (x.device() == device) return x;
  Tensor src = contiguous(x.detach());
  Tensor out = Tensor::empty(x.shape(), x.dtype(), device);
  const size_t bytes = size_t(x.numel() * itemsize(x.dtype()));
  if (bytes > 0)
    device::backend(device.is_cpu() ? x.device() : device)
        .copy_bytes(out.raw_data(), device, src.raw_data(), x.device(), bytes, non_blocking);
  const Device from = x.device();
  return autograd::record("to", out, {x}, [from](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{to_device(g, from)};
  });
}

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor out = Tensor::empty(shape, dtype, device);
  kernel::fill(out, value);
  return out;
}

Tensor scalar_like(double value, const Tensor& like) { return full({}, value, like.dtype(), like.device()); }
Tensor mul_scalar(const Tensor& a, double s) { return mul(a, scalar_like(s, a)); }
Tensor add_scalar(const Tensor& a, double s) { return add(a, scalar_like(s, a)); }

DType unary_result_dtype(UnaryOp op, DType x) {
  return operand_dtype(op_info(op).domain, x);  // exp(int) -> float32
}

DType binary_common_dtype(BinaryOp op, DType a, DType b) {
  return operand_dtype(op_info(op).domain, promote_types(a, b));  // int / int -> float32
}

DType binary_result_dtype(BinaryOp op, DType a, DType b) {
  return is_comparison(op) ? DType::Bool : binary_common_dtype(op, a, b);
}

Tensor unary(UnaryOp op, const Tensor& x) {
  NX_CHECK_TYPE(accepts(op_info(op).domain, x.dtype()), op_name(op), ": not supported for bool tensors");
  DType dt = unary_result_dtype(op, x.dtype());
  DType cdt = compute_dtype(dt);
  Tensor xc = cast(x, cdt);
  Tensor out = Tensor::empty(x.shape(), cdt, x.device());
  kernel::unary(op, out, xc);
  out = cast(out, dt);
  if (is_backward_only(op)) return out;
  return autograd::record(op_name(op).data(), out, {x}, grad::unary(op, x, out.detach()));
}

// True when some element of b (an integer or bool tensor) satisfies pred.
template <class Pred> static bool any_of(const Tensor& b, Pred pred) {
  Tensor v = contiguous(cast(to_device(b.detach(), Device::cpu()), DType::Int64));
  const int64_t* p = v.data<int64_t>();
  for (int64_t i = 0; i < v.numel(); ++i)
    if (pred(p[i])) return true;
  return false;
}

// What integer operands may not hold, checked before the kernel runs (as numpy and torch do):
// a negative exponent has no integer result, and integer // and % by zero have none either.
static void check_integer_operands(BinaryOp op, DType dt, const Tensor& b) {
  if (is_floating(dt)) return;
  if (op == BinaryOp::Pow)
    NX_CHECK(!any_of(b, [](int64_t v) { return v < 0; }),
             "pow: integers to negative integer powers are not allowed (as in numpy and torch); "
             "make the base floating point first, e.g. x.astype(nx.float32) ** -1");
  if (op == BinaryOp::FloorDiv || op == BinaryOp::Remainder)
    if (any_of(b, [](int64_t v) { return v == 0; }))
      throw ZeroDivisionError(str(op_name(op), ": integer division by zero (as Python's ",
                                  op == BinaryOp::FloorDiv ? "//" : "%",
                                  " and torch raise); "
                                  "floating-point operands give inf or nan instead"));
}

Shape binary_shape(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = op_name(op).data();
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  NX_CHECK_TYPE(accepts(op_info(op).domain, promote_types(a.dtype(), b.dtype())), name,
                ": not supported for bool tensors; convert with astype first");
  return shape;
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = op_name(op).data();
  Shape shape = binary_shape(op, a, b);
  const Device dev = common_device(name, {a, b});
  DType dt = binary_common_dtype(op, a.dtype(), b.dtype());
  check_integer_operands(op, dt, b);
  DType cdt = compute_dtype(dt);
  Tensor ac = cpu::broadcast_view(cast(to_device(a, dev), cdt), shape);
  Tensor bc = cpu::broadcast_view(cast(to_device(b, dev), cdt), shape);
  Tensor out = Tensor::empty(shape, is_comparison(op) ? DType::Bool : cdt, dev);
  kernel::binary(op, out, ac, bc);
  if (is_comparison(op)) return out;
  out = cast(out, dt);
  if (is_backward_only(op)) return out;
  return autograd::record(name, out, {a, b}, grad::binary(op, a, b, out.detach()));
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  const Device dev = common_device("where", {cond, a, b});
  DType dt = promote_types(a.dtype(), b.dtype());
  DType cdt = compute_dtype(dt);
  Tensor out = Tensor::empty(shape, cdt, dev);
  kernel::where(out, cpu::broadcast_view(cast(to_device(cond, dev), DType::Bool), shape),
                cpu::broadcast_view(cast(to_device(a, dev), cdt), shape),
                cpu::broadcast_view(cast(to_device(b, dev), cdt), shape));
  out = cast(out, dt);
  return autograd::record("where", out, {Tensor(), a, b}, grad::where(cond, a, b));
}

Tensor contiguous(const Tensor& x, bool force_copy) {
  if (x.is_contiguous() && !force_copy) return x;
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  kernel::cast(out, x);
  return autograd::record("contiguous", out, {x},
                          [](const Tensor& g, const std::vector<bool>&) { return std::vector<Tensor>{g}; });
}

void copy_(const Tensor& dst, const Tensor& src) {
  NX_CHECK(broadcast_shapes(dst.shape(), src.shape(), "copy") == dst.shape(), "could not broadcast a value of shape ",
           shape_str(src.shape()), " into shape ", shape_str(dst.shape()),
           " (as numpy: the value's shape must broadcast to the target's)");
  // A source sharing the destination's storage may overlap it: read it from a copy, as numpy.
  const Tensor moved = to_device(src.detach(), dst.device());
  const Tensor s = moved.storage() == dst.storage() ? contiguous(moved, true) : moved;
  kernel::cast(dst, cpu::broadcast_view(s, dst.shape()));
}

}  // namespace nexus::ops
