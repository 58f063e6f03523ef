// Optimizer update loops. Each inner loop runs over contiguous restrict pointers with no branch
// per element (variants are chosen outside the loop), so the compiler vectorises it. The formulas
// follow PyTorch's single-tensor implementations operation by operation.
#include "ops/cpu/kernels.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "base/thread_pool.h"

namespace nexus::ops::cpu::NX_CPU_VARIANT {
namespace {

// Element offsets of each segment in the virtual concatenation of all segments.
std::vector<int64_t> segment_starts(const std::vector<OptimSegment>& segs) {
  std::vector<int64_t> start(segs.size() + 1, 0);
  for (size_t i = 0; i < segs.size(); ++i) start[i + 1] = start[i] + segs[i].numel;
  return start;
}

// Calls fn(seg, lo, hi) for the part of each segment inside [begin, end) of the concatenation,
// in order.
template <class Fn> void for_pieces(const std::vector<OptimSegment>& segs, const std::vector<int64_t>& start,
                                    int64_t begin, int64_t end, const Fn& fn) {
  size_t i = size_t(std::upper_bound(start.begin(), start.end(), begin) - start.begin()) - 1;
  for (; i < segs.size() && start[i] < end; ++i) {
    int64_t lo = std::max(begin, start[i]) - start[i];
    int64_t hi = std::min(end, start[i + 1]) - start[i];
    if (lo < hi) fn(segs[i], lo, hi);
  }
}

// Splits the concatenation over the thread pool; fn(seg, lo, hi) updates elements [lo, hi).
template <class Fn> void parallel_pieces(const std::vector<OptimSegment>& segs, const Fn& fn) {
  std::vector<int64_t> start = segment_starts(segs);
  parallel_for(start.back(), kElementwiseGrain, [&](int64_t b, int64_t e) { for_pieces(segs, start, b, e, fn); });
}

template <class T> T* at(void* p, int64_t lo) { return static_cast<T*>(p) + lo; }
template <class T> const T* at(const void* p, int64_t lo) { return static_cast<const T*>(p) + lo; }

// Calls fn.template operator()<T>() with T the segment's element type.
template <class Fn> void dispatch(DType dtype, const Fn& fn) {
  if (dtype == DType::Float32) return fn(float{});
  NX_ASSERT(dtype == DType::Float64, "optimizer kernel got dtype ", dtype_name(dtype));
  fn(double{});
}

// ---- SGD (torch.optim.SGD) --------------------------------------------------------------------
// d = gs*g + wd*p;  buf = keep*buf + add*d;  d = nesterov ? d + momentum*buf : buf;  p -= lr*d

template <class T> void sgd_plain(T* __restrict p, const T* __restrict g, int64_t n, T lr, T gs, T wd) {
  for (int64_t i = 0; i < n; ++i) p[i] = p[i] - lr * (gs * g[i] + wd * p[i]);
}

template <class T, bool kNesterov> void sgd_momentum(T* __restrict p, const T* __restrict g, T* __restrict buf,
                                                     int64_t n, T lr, T gs, T wd, T keep, T add, T momentum) {
  for (int64_t i = 0; i < n; ++i) {
    T d = gs * g[i] + wd * p[i];
    T b = keep * buf[i] + add * d;
    buf[i] = b;
    if constexpr (kNesterov) d = d + momentum * b;
    else d = b;
    p[i] = p[i] - lr * d;
  }
}

// ---- Adam / AdamW (torch.optim.Adam, torch.optim.AdamW) ----------------------------------------
// d = gs*g + l2*p;  m += (1-b1)*(d - m);  v = b2*v + (1-b2)*d*d;
// p = decay*p - step_size * m / (sqrt(v)/bias2_sqrt + eps)

template <class T> void adam_loop(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v, int64_t n,
                                  T gs, T l2, T decay, T omb1, T b2, T omb2, T eps, T neg_step, T bias2_sqrt) {
  for (int64_t i = 0; i < n; ++i) {
    T d = gs * g[i] + l2 * p[i];
    T mi = m[i] + omb1 * (d - m[i]);
    T vi = b2 * v[i] + omb2 * d * d;
    m[i] = mi;
    v[i] = vi;
    T denom = std::sqrt(vi) / bias2_sqrt + eps;
    p[i] = decay * p[i] + neg_step * mi / denom;
  }
}

// ---- gradient norm ---------------------------------------------------------------------------

constexpr int64_t kNormBlock = 4096;  // fixed: the summation order never depends on threads

template <class T> double sum_squares(const T* __restrict x, int64_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += double(x[i + j]) * double(x[i + j]);
  for (; i < n; ++i) acc[0] += double(x[i]) * double(x[i]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

}  // namespace

static void sgd_kernel(const std::vector<OptimSegment>& segs, const SgdCoeffs& c) {
  parallel_pieces(segs, [&](const OptimSegment& s, int64_t lo, int64_t hi) {
    dispatch(s.dtype, [&](auto zero) {
      using T = decltype(zero);
      T* p = at<T>(s.param, lo);
      const T* g = at<T>(s.grad, lo);
      T lr = T(c.lr), gs = T(c.grad_scale), wd = T(c.weight_decay);
      if (!c.use_momentum) return sgd_plain<T>(p, g, hi - lo, lr, gs, wd);
      T* buf = at<T>(s.m, lo);
      auto run = c.nesterov ? sgd_momentum<T, true> : sgd_momentum<T, false>;
      run(p, g, buf, hi - lo, lr, gs, wd, T(s.buf_keep), T(s.buf_add), T(c.momentum));
    });
  });
}

static void adam_kernel(const std::vector<OptimSegment>& segs, const AdamCoeffs& c) {
  parallel_pieces(segs, [&](const OptimSegment& s, int64_t lo, int64_t hi) {
    dispatch(s.dtype, [&](auto zero) {
      using T = decltype(zero);
      adam_loop<T>(at<T>(s.param, lo), at<T>(s.grad, lo), at<T>(s.m, lo), at<T>(s.v, lo), hi - lo, T(c.grad_scale),
                   T(c.l2), T(c.decay), T(c.one_minus_beta1), T(c.beta2), T(c.one_minus_beta2), T(c.eps),
                   T(-s.step_size), T(s.bias2_sqrt));
    });
  });
}

static double sum_squares_kernel(const std::vector<OptimSegment>& segs) {
  std::vector<int64_t> start = segment_starts(segs);
  int64_t blocks = (start.back() + kNormBlock - 1) / kNormBlock;
  std::vector<double> partial(size_t(blocks), 0.0);
  parallel_for(blocks, kElementwiseGrain / kNormBlock, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      double sum = 0;
      for_pieces(segs, start, b * kNormBlock, (b + 1) * kNormBlock, [&](const OptimSegment& s, int64_t lo, int64_t hi) {
        dispatch(s.dtype, [&](auto zero) {
          using T = decltype(zero);
          sum += sum_squares<T>(at<T>(s.grad, lo), hi - lo);
        });
      });
      partial[size_t(b)] = sum;
    }
  });
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

static void scale_grads_kernel(const std::vector<OptimSegment>& segs, double scale) {
  parallel_pieces(segs, [&](const OptimSegment& s, int64_t lo, int64_t hi) {
    dispatch(s.dtype, [&](auto zero) {
      using T = decltype(zero);
      T* __restrict g = static_cast<T*>(const_cast<void*>(s.grad)) + lo;
      T k = T(scale);
      for (int64_t i = 0; i < hi - lo; ++i) g[i] = g[i] * k;
    });
  });
}

void add_optim(Kernels& k) {
  k.sgd = sgd_kernel;
  k.adam = adam_kernel;
  k.sum_squares = sum_squares_kernel;
  k.scale_grads = scale_grads_kernel;
}

}  // namespace nexus::ops::cpu::NX_CPU_VARIANT
