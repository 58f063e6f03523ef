// The geometry of 2-D convolution and pooling, and the conventions of their CPU kernels
// (conv_kernel.cpp, in the table of kernels.h):
//   - x is (n, c, h, w); conv weights are (k, c, kh, kw); outputs are (n, k|c, out_h, out_w).
//   - No dilation, no groups. Pooling has one padding for both axes.
//   - Callers validate with check_conv2d / check_pool2d first; the kernels assume a valid geometry.
//   - Gradient outputs are overwritten (not accumulated into). An undefined gradient is skipped.
//   - Contiguous float32 or float64 tensors.
#pragma once

#include <cstdint>

namespace nexus::ops {

// Shape of a conv2d: input (n, c, h, w), weight (k, c, kh, kw), output (n, k, out_h, out_w).
struct Conv2dGeometry {
  int64_t n, c, h, w;
  int64_t k;  // output channels
  int64_t kh, kw;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;

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
// non-positive channel/spatial/kernel size or stride, negative padding, or a kernel larger than
// the padded input. A batch of 0 is allowed (the kernels then do nothing but zero the weight
// gradients). Pooling also requires pad <= kernel / 2 (as PyTorch), so no window is all padding.
// ValueError naming `op` when the geometry is invalid (ops/conv.cpp).
void check_conv2d(const Conv2dGeometry& g, const char* op);
void check_pool2d(const Pool2dGeometry& g, const char* op);

// y = conv(x, w) + bias. bias (k) may be null. im2col + gemm, parallel over the batch.
}  // namespace nexus::ops
