// conv2d's device pieces (im2col, its adjoint col2im, the bias and its gradient, the sum of
// per-image weight gradients; cuda/conv.cpp runs the GEMMs between them) and 2-D max/avg pooling,
// as the host kernels of ops/cpu/conv_kernel.cpp (its header gives the conventions).
//
// Nothing here uses atomics: every output element is written by one thread that sums its
// contributions in a fixed order, so results have the same bits on every run. The adjoints are
// gathers: an input pixel visits the col entries / windows that read it, in the order the host's
// scatter adds them (col2im: taps (i, j) ascending; pooling: windows (oh, ow) ascending), so
// col2im and the pooling gradients match the host bit for bit given the same inputs.
#include "kernels/common.cuh"

namespace nexus::cuda {
namespace {

// A Conv2dGeometry with the output size worked out on the host (its out_h() is host-only).
struct ConvDims {
  int64_t c, h, w, kh, kw, sh, sw, ph, pw, oh, ow;
};

ConvDims conv_dims(const ops::Conv2dGeometry& g) {
  return {g.c, g.h, g.w, g.kh, g.kw, g.stride_h, g.stride_w, g.pad_h, g.pad_w, g.out_h(), g.out_w()};
}

struct PoolDims {
  int64_t h, w, kh, kw, sh, sw, pad, oh, ow;
};

PoolDims pool_dims(const ops::Pool2dGeometry& g) {
  return {g.h, g.w, g.kh, g.kw, g.stride_h, g.stride_w, g.pad, g.out_h(), g.out_w()};
}

template <class T> __device__ __forceinline__ T neg_inf();
template <> __device__ __forceinline__ float neg_inf<float>() { return __int_as_float(int(0xff800000u)); }
template <> __device__ __forceinline__ double neg_inf<double>() {
  return __longlong_as_double(static_cast<long long>(0xfff0000000000000ull));
}

__device__ __forceinline__ int64_t lesser(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ __forceinline__ int64_t greater(int64_t a, int64_t b) { return a < b ? b : a; }

__device__ __forceinline__ int64_t first_index() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t grid_step() { return int64_t(gridDim.x) * blockDim.x; }

// col[b][(ci*kh + i)*kw + j][oh*ow_n + ow] = x[b][ci][oh*sh - ph + i][ow*sw - pw + j], 0 in the
// padding; one thread per col entry (consecutive threads: consecutive output pixels).
template <class T> __global__ void im2col_kernel(ConvDims d, const T* x, T* col, int64_t total) {
  const int64_t pixels = d.oh * d.ow, taps = d.c * d.kh * d.kw;
  for (int64_t e = first_index(); e < total; e += grid_step()) {
    const int64_t p = e % pixels, row = (e / pixels) % taps, b = e / (pixels * taps);
    const int64_t oh = p / d.ow, ow = p % d.ow;
    const int64_t j = row % d.kw, i = (row / d.kw) % d.kh, ci = row / (d.kw * d.kh);
    const int64_t ih = oh * d.sh - d.ph + i, iw = ow * d.sw - d.pw + j;
    T v = T(0);
    if (ih >= 0 && ih < d.h && iw >= 0 && iw < d.w) v = x[((b * d.c + ci) * d.h + ih) * d.w + iw];
    col[e] = v;
  }
}

// dx[b][ci][ih][iw] = the sum of the col entries im2col read from that pixel, taps (i, j)
// ascending (each tap reads a pixel at most once); one thread per input pixel.
template <class T> __global__ void col2im_kernel(ConvDims d, const T* col, T* dx, int64_t total) {
  const int64_t pixels = d.oh * d.ow, taps = d.c * d.kh * d.kw;
  for (int64_t e = first_index(); e < total; e += grid_step()) {
    const int64_t iw = e % d.w, ih = (e / d.w) % d.h, ci = (e / (d.w * d.h)) % d.c, b = e / (d.w * d.h * d.c);
    const T* rows = col + (b * taps + ci * d.kh * d.kw) * pixels;  // this channel's first tap
    T acc = T(0);
    for (int64_t i = 0; i < d.kh; ++i) {
      const int64_t th = ih + d.ph - i;  // oh * sh for the output row reading (ih, i)
      if (th < 0) break;                 // th only falls as i grows
      if (th % d.sh != 0 || th / d.sh >= d.oh) continue;
      const int64_t oh = th / d.sh;
      for (int64_t j = 0; j < d.kw; ++j) {
        const int64_t tw = iw + d.pw - j;
        if (tw < 0) break;
        if (tw % d.sw != 0 || tw / d.sw >= d.ow) continue;
        acc += rows[(i * d.kw + j) * pixels + oh * d.ow + tw / d.sw];
      }
    }
    dx[e] = acc;
  }
}

// y[b][k][p] += bias[k] over `total` = n*k*pixels elements.
template <class T> __global__ void add_bias_kernel(T* y, const T* bias, int64_t k, int64_t pixels, int64_t total) {
  for (int64_t e = first_index(); e < total; e += grid_step()) y[e] += bias[(e / pixels) % k];
}

// dbias[ch] = the sum of dy[b][ch][p] over b and p: one block per channel, thread t adds
// elements t, t + T, ... in double, then a fixed tree (as reduce.cu's sums).
constexpr int kBiasThreads = 256;

template <class T> __global__ void bias_grad_kernel(T* dbias, const T* dy, int64_t n, int64_t k, int64_t pixels) {
  __shared__ double part[kBiasThreads];
  const int tid = threadIdx.x;
  const int64_t per_channel = n * pixels;
  for (int64_t ch = blockIdx.x; ch < k; ch += gridDim.x) {
    double acc = 0;
    for (int64_t r = tid; r < per_channel; r += blockDim.x)
      acc += double(dy[((r / pixels) * k + ch) * pixels + r % pixels]);
    part[tid] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
      if (tid < s) part[tid] += part[tid + s];
      __syncthreads();
    }
    if (tid == 0) dbias[ch] = T(part[0]);
    __syncthreads();  // part[0] is read before the next channel overwrites it
  }
}

// out[i] = (accumulate ? out[i] : 0) + parts[0][i] + parts[1][i] + ... in double, in part order.
template <class T>
__global__ void sum_parts_kernel(T* out, const T* parts, int64_t count, int64_t size, bool accumulate) {
  for (int64_t e = first_index(); e < size; e += grid_step()) {
    double acc = accumulate ? double(out[e]) : 0.0;
    for (int64_t b = 0; b < count; ++b) acc += double(parts[b * size + e]);
    out[e] = T(acc);
  }
}

// The outputs (lo..hi, inclusive) along one axis whose window of `kernel` taps (stride, pad)
// covers input index `in`; empty when lo > hi.
struct Span {
  int64_t lo, hi;
};

__device__ __forceinline__ Span covering(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t out) {
  const int64_t first = in + pad - kernel + 1;  // need o*stride >= first
  const int64_t lo = first <= 0 ? 0 : (first + stride - 1) / stride;
  const int64_t hi = lesser((in + pad) / stride, out - 1);
  return {lo, hi};
}

// One thread per output: the window clipped to the input, scanned row by row; the first maximum
// wins, a NaN replaces anything (so the last NaN wins), as the host's window_max.
template <class T> __global__ void max_pool_kernel(PoolDims d, const T* x, T* y, int64_t* argmax, int64_t total) {
  const int64_t out_plane = d.oh * d.ow;
  for (int64_t e = first_index(); e < total; e += grid_step()) {
    const int64_t o = e % out_plane, plane = e / out_plane;
    const int64_t h0 = (o / d.ow) * d.sh - d.pad, w0 = (o % d.ow) * d.sw - d.pad;
    const int64_t h1 = lesser(h0 + d.kh, d.h), w1 = lesser(w0 + d.kw, d.w);
    const int64_t hs = greater(h0, 0), ws = greater(w0, 0);
    const T* xp = x + plane * d.h * d.w;
    T best = neg_inf<T>();
    int64_t at = hs * d.w + ws;
    for (int64_t ih = hs; ih < h1; ++ih) {
      for (int64_t iw = ws; iw < w1; ++iw) {
        const T v = xp[ih * d.w + iw];
        if (v > best || v != v) {
          best = v;
          at = ih * d.w + iw;
        }
      }
    }
    y[e] = best;
    if (argmax != nullptr) argmax[e] = at;
  }
}

// One thread per input pixel: the sum of dy over the windows whose argmax is this pixel, windows
// in (oh, ow) order (the order the host adds them in).
template <class T>
__global__ void max_pool_backward_kernel(PoolDims d, const T* dy, const int64_t* argmax, T* dx, int64_t total) {
  const int64_t out_plane = d.oh * d.ow;
  for (int64_t e = first_index(); e < total; e += grid_step()) {
    const int64_t iw = e % d.w, ih = (e / d.w) % d.h, plane = e / (d.w * d.h);
    const int64_t target = ih * d.w + iw;
    const Span rh = covering(ih, d.kh, d.sh, d.pad, d.oh), rw = covering(iw, d.kw, d.sw, d.pad, d.ow);
    const T* g = dy + plane * out_plane;
    const int64_t* idx = argmax + plane * out_plane;
    T acc = T(0);
    for (int64_t oh = rh.lo; oh <= rh.hi; ++oh)
      for (int64_t ow = rw.lo; ow <= rw.hi; ++ow)
        if (idx[oh * d.ow + ow] == target) acc += g[oh * d.ow + ow];
    dx[e] = acc;
  }
}

// The window's in-input elements summed in double, row by row, times scale = 1 / (kh*kw).
template <class T> __global__ void avg_pool_kernel(PoolDims d, const T* x, T* y, double scale, int64_t total) {
  const int64_t out_plane = d.oh * d.ow;
  for (int64_t e = first_index(); e < total; e += grid_step()) {
    const int64_t o = e % out_plane, plane = e / out_plane;
    const int64_t h0 = (o / d.ow) * d.sh - d.pad, w0 = (o % d.ow) * d.sw - d.pad;
    const int64_t h1 = lesser(h0 + d.kh, d.h), w1 = lesser(w0 + d.kw, d.w);
    const T* xp = x + plane * d.h * d.w;
    double sum = 0;
    for (int64_t ih = greater(h0, 0); ih < h1; ++ih)
      for (int64_t iw = greater(w0, 0); iw < w1; ++iw) sum += double(xp[ih * d.w + iw]);
    y[e] = T(sum * scale);
  }
}

// One thread per input pixel: the shares T(dy * scale) of the windows covering it, added in
// (oh, ow) order in T (as the host's scatter adds them).
template <class T>
__global__ void avg_pool_backward_kernel(PoolDims d, const T* dy, T* dx, double scale, int64_t total) {
  const int64_t out_plane = d.oh * d.ow;
  for (int64_t e = first_index(); e < total; e += grid_step()) {
    const int64_t iw = e % d.w, ih = (e / d.w) % d.h, plane = e / (d.w * d.h);
    const Span rh = covering(ih, d.kh, d.sh, d.pad, d.oh), rw = covering(iw, d.kw, d.sw, d.pad, d.ow);
    const T* g = dy + plane * out_plane;
    T acc = T(0);
    for (int64_t oh = rh.lo; oh <= rh.hi; ++oh)
      for (int64_t ow = rw.lo; ow <= rw.hi; ++ow) acc += T(double(g[oh * d.ow + ow]) * scale);
    dx[e] = acc;
  }
}

}  // namespace

void launch_im2col(DType t, const ops::Conv2dGeometry& g, const void* x, int64_t images, void* col,
                   cudaStream_t stream) {
  const int64_t total = images * g.c * g.kh * g.kw * g.out_h() * g.out_w();
  if (total == 0) return;
  dispatch_float(t, "im2col", [&](auto v) {
    using T = decltype(v);
    im2col_kernel<T>
        <<<grid_for(total), kThreads, 0, stream>>>(conv_dims(g), static_cast<const T*>(x), static_cast<T*>(col), total);
  });
  check_launch("im2col");
}

void launch_col2im(DType t, const ops::Conv2dGeometry& g, const void* col, int64_t images, void* dx,
                   cudaStream_t stream) {
  const int64_t total = images * g.c * g.h * g.w;
  if (total == 0) return;
  dispatch_float(t, "col2im", [&](auto v) {
    using T = decltype(v);
    col2im_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(conv_dims(g), static_cast<const T*>(col),
                                                               static_cast<T*>(dx), total);
  });
  check_launch("col2im");
}

void launch_add_bias(DType t, void* y, const void* bias, int64_t n, int64_t k, int64_t pixels, cudaStream_t stream) {
  const int64_t total = n * k * pixels;
  if (total == 0) return;
  dispatch_float(t, "conv2d bias", [&](auto v) {
    using T = decltype(v);
    add_bias_kernel<T>
        <<<grid_for(total), kThreads, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(bias), k, pixels, total);
  });
  check_launch("conv2d bias");
}

void launch_bias_grad(DType t, void* dbias, const void* dy, int64_t n, int64_t k, int64_t pixels, cudaStream_t stream) {
  if (k == 0) return;
  const unsigned blocks = unsigned(k < kMaxBlocks ? k : kMaxBlocks);
  dispatch_float(t, "conv2d bias gradient", [&](auto v) {
    using T = decltype(v);
    bias_grad_kernel<T>
        <<<blocks, kBiasThreads, 0, stream>>>(static_cast<T*>(dbias), static_cast<const T*>(dy), n, k, pixels);
  });
  check_launch("conv2d bias gradient");
}

void launch_sum_parts(DType t, void* out, const void* parts, int64_t count, int64_t size, bool accumulate,
                      cudaStream_t stream) {
  if (size == 0) return;
  dispatch_float(t, "conv2d weight gradient", [&](auto v) {
    using T = decltype(v);
    sum_parts_kernel<T><<<grid_for(size), kThreads, 0, stream>>>(static_cast<T*>(out), static_cast<const T*>(parts),
                                                                 count, size, accumulate);
  });
  check_launch("conv2d weight gradient");
}

void launch_max_pool2d_forward(DType t, const ops::Pool2dGeometry& g, const void* x, void* y, int64_t* argmax,
                               cudaStream_t stream) {
  const int64_t total = g.n * g.c * g.out_h() * g.out_w();
  if (total == 0) return;
  dispatch_float(t, "max_pool2d", [&](auto v) {
    using T = decltype(v);
    max_pool_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(pool_dims(g), static_cast<const T*>(x),
                                                                 static_cast<T*>(y), argmax, total);
  });
  check_launch("max_pool2d");
}

void launch_max_pool2d_backward(DType t, const ops::Pool2dGeometry& g, const void* dy, const int64_t* argmax, void* dx,
                                cudaStream_t stream) {
  const int64_t total = g.n * g.c * g.h * g.w;
  if (total == 0) return;
  dispatch_float(t, "max_pool2d backward", [&](auto v) {
    using T = decltype(v);
    max_pool_backward_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(pool_dims(g), static_cast<const T*>(dy),
                                                                          argmax, static_cast<T*>(dx), total);
  });
  check_launch("max_pool2d backward");
}

void launch_avg_pool2d_forward(DType t, const ops::Pool2dGeometry& g, const void* x, void* y, cudaStream_t stream) {
  const int64_t total = g.n * g.c * g.out_h() * g.out_w();
  if (total == 0) return;
  const double scale = 1.0 / double(g.kh * g.kw);  // the host kernel's Acc(1) / Acc(kh * kw)
  dispatch_float(t, "avg_pool2d", [&](auto v) {
    using T = decltype(v);
    avg_pool_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(pool_dims(g), static_cast<const T*>(x),
                                                                 static_cast<T*>(y), scale, total);
  });
  check_launch("avg_pool2d");
}

void launch_avg_pool2d_backward(DType t, const ops::Pool2dGeometry& g, const void* dy, void* dx, cudaStream_t stream) {
  const int64_t total = g.n * g.c * g.h * g.w;
  if (total == 0) return;
  const double scale = 1.0 / double(g.kh * g.kw);
  dispatch_float(t, "avg_pool2d backward", [&](auto v) {
    using T = decltype(v);
    avg_pool_backward_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(pool_dims(g), static_cast<const T*>(dy),
                                                                          static_cast<T*>(dx), scale, total);
  });
  check_launch("avg_pool2d backward");
}

}  // namespace nexus::cuda
