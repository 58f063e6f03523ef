// The kernels the op front ends call, for any device: the host's from ops/cpu, a device's from
// its registered backend (device/backend.h). Operands are arranged as the CPU kernels expect
// (same device, broadcast views, compute dtypes); dispatch goes by the output's device.
#pragma once

#include <initializer_list>
#include <vector>

#include "base/reduce_op.h"
#include "ops/cpu/conv_kernel.h"
#include "ops/op_kind.h"
#include "tensor/tensor.h"

namespace nexus::ops::kernel {

void cast(const Tensor& dst, const Tensor& src);
void fill(const Tensor& out, double value);
void unary(UnaryOp op, const Tensor& out, const Tensor& x);
void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b);
void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
void reduce(ReduceOp op, const Tensor& out, const Tensor& x, const std::vector<int64_t>& axes);
void argmax(const Tensor& out, const Tensor& x, int64_t rows, int64_t n);
// NCHW convolution and pooling on contiguous float32/float64 tensors (device/backend.h says how);
// undefined bias, argmax or gradients are skipped.
// y = conv2d(x, w) + bias; then y = relu(y + residual) where given (residual of y's shape).
void conv2d_forward(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
                    const Tensor& residual = Tensor(), bool relu = false);
void conv2d_backward(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx,
                     const Tensor& dw, const Tensor& dbias);
void max_pool2d_forward(const Pool2dGeometry& g, const Tensor& x, const Tensor& y, const Tensor& argmax);
void max_pool2d_backward(const Pool2dGeometry& g, const Tensor& dy, const Tensor& argmax, const Tensor& dx);
void avg_pool2d_forward(const Pool2dGeometry& g, const Tensor& x, const Tensor& y);
void avg_pool2d_backward(const Pool2dGeometry& g, const Tensor& dy, const Tensor& dx);

}  // namespace nexus::ops::kernel

namespace nexus::ops {

// The device an op's operands share (undefined tensors skipped). A 0-d host tensor (a Python
// scalar) goes with a device tensor, as in PyTorch; any other mix is a ValueError naming the op
// and two of the devices.
Device common_device(const char* op, std::initializer_list<Tensor> operands);

}  // namespace nexus::ops
