// The geometry of 2-D convolution and pooling, and the conventions of their CPU kernels
// (conv_kernel.cpp, in the table of kernels.h):
//   - x is (n, c, h, w); conv weights are (k, c / groups, kh, kw); outputs are (n, k|c, out_h, out_w).
//   - Grouped convolutions split c and k into `groups` equal runs of channels: output channels
//     [q*k/groups, (q+1)*k/groups) read input channels [q*c/groups, (q+1)*c/groups) only
//     (groups == c: depthwise). No dilation. Pooling has one padding for both axes.
//   - Callers validate with check_conv2d / check_pool2d first; the kernels assume a valid geometry.
//   - Gradient outputs are overwritten (not accumulated into). An undefined gradient is skipped.
//   - Contiguous float32 or float64 tensors.
#pragma once

#include <cstdint>

#include "tensor/shape.h"

namespace nexus::ops {

// Shape of a conv2d: input (n, c, h, w), weight (k, c / groups, kh, kw), output (n, k, out_h, out_w).
struct Conv2dGeometry {
  int64_t n, c, h, w;
  int64_t k;  // output channels
  int64_t kh, kw;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t groups = 1;

  int64_t c_per_group() const { return c / groups; }  // the weight's second dimension
  int64_t k_per_group() const { return k / groups; }

  int64_t out_h() const { return (h + 2 * pad_h - kh) / stride_h + 1; }
  int64_t out_w() const { return (w + 2 * pad_w - kw) / stride_w + 1; }
};

// Shape of a 2-D pooling: input (n, c, h, w), output (n, c, out_h, out_w). Padded positions
// never win a max and count as zeros in an average (the divisor is always kh * kw).
struct Pool2dGeometry {
  int64_t n, c, h, w;
  int64_t kh, kw;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad = 0;

  int64_t out_h() const { return (h + 2 * pad - kh) / stride_h + 1; }
  int64_t out_w() const { return (w + 2 * pad - kw) / stride_w + 1; }
};

// Throw ValueError (NX_CHECK) naming `op` when the geometry is unusable: a negative batch, a
// non-positive channel/spatial/kernel size, groups or stride, negative padding, a kernel larger
// than the padded input, or channel counts that `groups` does not divide. A batch of 0 is allowed
// (the kernels then do nothing but zero the weight gradients). Pooling also requires
// pad <= kernel / 2 (as PyTorch), so no window is all padding. Defined in ops/conv.cpp.
void check_conv2d(const Conv2dGeometry& g, const char* op);
void check_pool2d(const Pool2dGeometry& g, const char* op);
// The checked geometry of conv2d's input of shape x and weight of shape w (ValueError when the
// ranks, the channels or the geometry do not fit).
Conv2dGeometry conv2d_geometry(const Shape& x, const Shape& w, int64_t stride_h, int64_t stride_w, int64_t pad_h,
                               int64_t pad_w, int64_t groups);
}  // namespace nexus::ops
