// Helpers shared by the op front ends; not part of the core's API.
#pragma once

#include "ops/ops.h"

namespace nexus::ops {

// Converts without recording autograd (kernels stage inputs in their compute dtype this way).
Tensor cast(const Tensor& x, DType dtype);

// Normalises reduction axes: empty = all; sorted, unique, in range (IndexError otherwise).
Axes normalize_axes(const Axes& axes, int64_t ndim, const char* op);
// The shape after reducing `axes` with keepdims.
Shape reduced_shape(const Shape& shape, const Axes& axes, bool keepdims);

}  // namespace nexus::ops
