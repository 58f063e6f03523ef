// CudaBackend's conv2d and 2-D pooling (device/backend.h; conventions of ops/cpu/conv_kernel.h).
//
// conv2d is im2col + GEMM, as on the host, with cuBLAS's column-major view of our row-major
// matrices (a row-major r x c matrix is a column-major c x r one with ld c). Per image b, with
// taps = c*kh*kw and pixels = out_h*out_w:
//   forward  y_b (k x pixels)     = w (k x taps) @ col_b (taps x pixels)
//   dw      += dy_b (k x pixels)  @ col_b^T
//   dx_b     = col2im(w^T @ dy_b)
// Images go in chunks whose im2col scratch (from the caching allocator) stays under
// kScratchBytes; a chunk is one strided-batched GEMM over its images. dw sums per-image parts in
// image order with a kernel (no atomics, no order left to cuBLAS), so it has the same bits on
// every run; dbias is a fixed-tree reduction per channel. A 1x1, stride-1, unpadded conv's col_b
// is x_b itself: it skips im2col and col2im and runs over the whole batch at once.
//
// Pooling is one kernel each (kernels/conv.cu); the gradients are gathers that add in the host's
// order, so they match the host bit for bit.
#include <algorithm>

#include "backend.h"
#include "cublas.h"
#include "device_guard.h"
#include "kernels/kernels.h"

namespace nexus::cuda {
namespace {

// An im2col chunk (plus the chunk's dw parts in the backward) stays under this many bytes;
// one image that needs more is a chunk by itself.
constexpr int64_t kScratchBytes = int64_t(256) << 20;

struct ConvSizes {
  int64_t taps;     // c*kh*kw
  int64_t pixels;   // out_h*out_w
  int64_t in_img;   // c*h*w
  int64_t out_img;  // k*pixels
};

ConvSizes conv_sizes(const ops::Conv2dGeometry& g) {
  if (g.groups != 1)
    throw NotImplementedError(str("conv2d with groups=", g.groups,
                                  " has no CUDA kernel yet; run grouped and depthwise convolutions on the CPU"));
  const int64_t pixels = g.out_h() * g.out_w();
  return {g.c * g.kh * g.kw, pixels, g.c * g.h * g.w, g.k * pixels};
}

// col_b == x_b: no im2col needed.
bool pointwise(const ops::Conv2dGeometry& g) {
  return g.kh == 1 && g.kw == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 && g.pad_w == 0;
}

// Images per chunk when each needs `per_image` elements of scratch.
int64_t chunk_images(int64_t n, int64_t per_image, DType t) {
  const int64_t bytes = std::max<int64_t>(per_image * itemsize(t), 1);
  return std::clamp<int64_t>(kScratchBytes / bytes, 1, std::max<int64_t>(n, 1));
}

// Element `at` of t's data.
void* elem(const Tensor& t, int64_t at) { return static_cast<char*>(t.raw_data()) + at * itemsize(t.dtype()); }

void check_float(DType t, const char* op) {
  NX_CHECK_TYPE(t == DType::Float32 || t == DType::Float64, op, " on CUDA: expected float32 or float64, got ",
                dtype_name(t));
}

}  // namespace

void CudaBackend::conv2d_forward(const ops::Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& bias,
                                 const Tensor& y) {
  const DType t = y.dtype();
  check_float(t, "conv2d");
  if (g.n == 0) return;
  DeviceGuard guard(y.device().index);
  const ConvSizes s = conv_sizes(g);
  const cudaStream_t stream = current_stream();
  // Column-major: y_b^T (pixels x k, ld pixels) = col_b^T (pixels x taps) @ w^T (taps x k).
  const GemmOperand wt{w.raw_data(), false, s.taps, 0};
  if (pointwise(g)) {
    const GemmOperand xs{x.raw_data(), false, s.pixels, s.in_img};
    gemm_strided_batched(t, s.pixels, g.k, s.taps, xs, wt, y.raw_data(), s.pixels, s.out_img, g.n, stream);
  } else {
    const int64_t chunk = chunk_images(g.n, s.taps * s.pixels, t);
    const Tensor col = Tensor::empty({chunk, s.taps, s.pixels}, t, y.device());
    const GemmOperand cols{col.raw_data(), false, s.pixels, s.taps * s.pixels};
    for (int64_t b0 = 0; b0 < g.n; b0 += chunk) {
      const int64_t nb = std::min(chunk, g.n - b0);
      launch_im2col(t, g, elem(x, b0 * s.in_img), nb, col.raw_data(), stream);
      gemm_strided_batched(t, s.pixels, g.k, s.taps, cols, wt, elem(y, b0 * s.out_img), s.pixels, s.out_img, nb,
                           stream);
    }
  }
  if (bias.defined()) launch_add_bias(t, y.raw_data(), bias.raw_data(), g.n, g.k, s.pixels, stream);
}

void CudaBackend::conv2d_backward(const ops::Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy,
                                  const Tensor& dx, const Tensor& dw, const Tensor& dbias) {
  const DType t = dy.dtype();
  check_float(t, "conv2d backward");
  DeviceGuard guard(dy.device().index);
  const ConvSizes s = conv_sizes(g);
  const cudaStream_t stream = current_stream();
  if (dbias.defined()) launch_bias_grad(t, dbias.raw_data(), dy.raw_data(), g.n, g.k, s.pixels, stream);
  if (g.n == 0) {
    if (dw.defined()) fill(dw, 0.0);
    return;
  }
  if (!dx.defined() && !dw.defined()) return;
  const bool direct = pointwise(g);
  // Per image: its columns (im2col for dw, then w^T dy_b for dx: the same buffer) and its dw part.
  const int64_t per_image = (direct ? 0 : s.taps * s.pixels) + (dw.defined() ? g.k * s.taps : 0);
  const int64_t chunk = chunk_images(g.n, per_image, t);
  const Tensor col = direct ? Tensor() : Tensor::empty({chunk, s.taps, s.pixels}, t, dy.device());
  const Tensor parts = dw.defined() ? Tensor::empty({chunk, g.k, s.taps}, t, dy.device()) : Tensor();
  for (int64_t b0 = 0; b0 < g.n; b0 += chunk) {
    const int64_t nb = std::min(chunk, g.n - b0);
    const GemmOperand dys{elem(dy, b0 * s.out_img), false, s.pixels, s.out_img};
    if (dw.defined()) {
      const void* cols = direct ? elem(x, b0 * s.in_img) : col.raw_data();
      if (!direct) launch_im2col(t, g, elem(x, b0 * s.in_img), nb, col.raw_data(), stream);
      // Column-major: part_b^T (taps x k, ld taps) = col_b (taps x pixels: op T) @ dy_b^T (pixels x k).
      gemm_strided_batched(t, s.taps, g.k, s.pixels, GemmOperand{cols, true, s.pixels, s.taps * s.pixels}, dys,
                           parts.raw_data(), s.taps, g.k * s.taps, nb, stream);
      launch_sum_parts(t, dw.raw_data(), parts.raw_data(), nb, g.k * s.taps, b0 > 0, stream);
    }
    if (dx.defined()) {
      // Column-major: dcol_b^T (pixels x taps, ld pixels) = dy_b^T (pixels x k) @ w (k x taps: op T).
      void* dcol = direct ? elem(dx, b0 * s.in_img) : col.raw_data();
      gemm_strided_batched(t, s.pixels, s.taps, g.k, dys, GemmOperand{w.raw_data(), true, s.taps, 0}, dcol, s.pixels,
                           s.taps * s.pixels, nb, stream);
      if (!direct) launch_col2im(t, g, col.raw_data(), nb, elem(dx, b0 * s.in_img), stream);
    }
  }
}

void CudaBackend::max_pool2d_forward(const ops::Pool2dGeometry& g, const Tensor& x, const Tensor& y,
                                     const Tensor& argmax) {
  check_float(y.dtype(), "max_pool2d");
  DeviceGuard guard(y.device().index);
  int64_t* idx = argmax.defined() ? static_cast<int64_t*>(argmax.raw_data()) : nullptr;
  launch_max_pool2d_forward(y.dtype(), g, x.raw_data(), y.raw_data(), idx, current_stream());
}

void CudaBackend::max_pool2d_backward(const ops::Pool2dGeometry& g, const Tensor& dy, const Tensor& argmax,
                                      const Tensor& dx) {
  check_float(dx.dtype(), "max_pool2d backward");
  DeviceGuard guard(dx.device().index);
  launch_max_pool2d_backward(dx.dtype(), g, dy.raw_data(), static_cast<const int64_t*>(argmax.raw_data()),
                             dx.raw_data(), current_stream());
}

void CudaBackend::avg_pool2d_forward(const ops::Pool2dGeometry& g, const Tensor& x, const Tensor& y) {
  check_float(y.dtype(), "avg_pool2d");
  DeviceGuard guard(y.device().index);
  launch_avg_pool2d_forward(y.dtype(), g, x.raw_data(), y.raw_data(), current_stream());
}

void CudaBackend::avg_pool2d_backward(const ops::Pool2dGeometry& g, const Tensor& dy, const Tensor& dx) {
  check_float(dx.dtype(), "avg_pool2d backward");
  DeviceGuard guard(dx.device().index);
  launch_avg_pool2d_backward(dx.dtype(), g, dy.raw_data(), dx.raw_data(), current_stream());
}

}  // namespace nexus::cuda
