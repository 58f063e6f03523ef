// 2-D convolution and pooling kernels on contiguous NCHW buffers (raw pointers, no Tensor).
//
// Conventions shared by every kernel here:
//   - x is (n, c, h, w); conv weights are (k, c, kh, kw); outputs are (n, k|c, out_h, out_w).
//   - No dilation, no groups. Pooling has one padding for both axes.
//   - Callers validate with check_conv2d / check_pool2d first; the kernels assume a valid geometry.
//   - Gradient outputs are overwritten (not accumulated into). A null gradient pointer skips it.
//   - Implemented for T = float and double (explicit instantiations in conv_kernel.cpp).
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
void check_conv2d(const Conv2dGeometry& g, const char* op);
void check_pool2d(const Pool2dGeometry& g, const char* op);

// y = conv(x, w) + bias. bias (k) may be null. im2col + gemm, parallel over the batch.
template <class T> void conv2d_forward(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y);

// Gradients of conv2d_forward given dy (n, k, out_h, out_w). Any of dx (n, c, h, w),
// dw (k, c, kh, kw) and dbias (k) may be null. dw and dbias are summed over the batch in a fixed
// order, so they are bitwise reproducible for a given thread count.
template <class T>
void conv2d_backward(const Conv2dGeometry& g, const T* x, const T* w, const T* dy, T* dx, T* dw, T* dbias);

// y = max over each window. argmax (same shape as y, may be null) receives the winning flat index
// into the input's h*w plane. A NaN in a window wins (the output is NaN), as in PyTorch.
template <class T> void max_pool2d_forward(const Pool2dGeometry& g, const T* x, T* y, int64_t* argmax);

// dx = zeros, then dx[plane][argmax] += dy for each output element.
template <class T> void max_pool2d_backward(const Pool2dGeometry& g, const T* dy, const int64_t* argmax, T* dx);

// y = sum over each window / (kh * kw).
template <class T> void avg_pool2d_forward(const Pool2dGeometry& g, const T* x, T* y);

// dx = zeros, then each dy / (kh * kw) is spread over its window.
template <class T> void avg_pool2d_backward(const Pool2dGeometry& g, const T* dy, T* dx);

}  // namespace nexus::ops
