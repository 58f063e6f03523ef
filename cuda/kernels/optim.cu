// The optimizers' updates on the device, one kernel per parameter: the formulas of the host loops
// (ops/cpu/optim_kernel.cpp) operation by operation, with the coefficients rounded to the
// parameter's dtype as there. With --fmad=false and IEEE sqrt and division (nvcc's defaults),
// each element gets the host's bits.
#include "kernels/common.cuh"

namespace nexus::cuda {
namespace {

// d = gs*g + wd*p;  buf = keep*buf + add*d;  d = nesterov ? d + momentum*buf : buf;  p -= lr*d
template <class T, bool kMomentum, bool kNesterov>
__global__ void sgd_kernel(T* p, const T* g, T* buf, int64_t n, T lr, T gs, T wd, T keep, T add, T momentum) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    if constexpr (!kMomentum) {
      p[i] = p[i] - lr * (gs * g[i] + wd * p[i]);
    } else {
      T d = gs * g[i] + wd * p[i];
      const T b = keep * buf[i] + add * d;
      buf[i] = b;
      if constexpr (kNesterov) d = d + momentum * b;
      else d = b;
      p[i] = p[i] - lr * d;
    }
  }
}

// d = gs*g + l2*p;  m += (1-b1)*(d - m);  v = b2*v + (1-b2)*d*d;
// p = decay*p - step_size * m / (sqrt(v)/bias2_sqrt + eps)
template <class T> __global__ void adam_kernel(T* p, const T* g, T* m, T* v, int64_t n, T gs, T l2, T decay, T omb1,
                                               T b2, T omb2, T eps, T neg_step, T bias2_sqrt) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const T d = gs * g[i] + l2 * p[i];
    const T mi = m[i] + omb1 * (d - m[i]);
    const T vi = b2 * v[i] + omb2 * d * d;
    m[i] = mi;
    v[i] = vi;
    const T denom = sqrt(vi) / bias2_sqrt + eps;
    p[i] = decay * p[i] + neg_step * mi / denom;
  }
}

}  // namespace

void launch_sgd(const ops::cpu::OptimSegment& s, const ops::cpu::SgdCoeffs& c, cudaStream_t stream) {
  if (s.numel == 0) return;
  dispatch_float(s.dtype, "sgd", [&](auto zero) {
    using T = decltype(zero);
    T* p = static_cast<T*>(s.param);
    const T* g = static_cast<const T*>(s.grad);
    T* buf = static_cast<T*>(s.m);
    const T lr = T(c.lr), gs = T(c.grad_scale), wd = T(c.weight_decay);
    const T keep = T(s.buf_keep), add = T(s.buf_add), momentum = T(c.momentum);
    const unsigned blocks = grid_for(s.numel);
    if (!c.use_momentum)
      sgd_kernel<T, false, false><<<blocks, kThreads, 0, stream>>>(p, g, buf, s.numel, lr, gs, wd, keep, add, momentum);
    else if (c.nesterov)
      sgd_kernel<T, true, true><<<blocks, kThreads, 0, stream>>>(p, g, buf, s.numel, lr, gs, wd, keep, add, momentum);
    else
      sgd_kernel<T, true, false><<<blocks, kThreads, 0, stream>>>(p, g, buf, s.numel, lr, gs, wd, keep, add, momentum);
  });
  check_launch("sgd");
}

void launch_adam(const ops::cpu::OptimSegment& s, const ops::cpu::AdamCoeffs& c, cudaStream_t stream) {
  if (s.numel == 0) return;
  dispatch_float(s.dtype, "adam", [&](auto zero) {
    using T = decltype(zero);
    adam_kernel<T><<<grid_for(s.numel), kThreads, 0, stream>>>(
        static_cast<T*>(s.param), static_cast<const T*>(s.grad), static_cast<T*>(s.m), static_cast<T*>(s.v), s.numel,
        T(c.grad_scale), T(c.l2), T(c.decay), T(c.one_minus_beta1), T(c.beta2), T(c.one_minus_beta2), T(c.eps),
        T(-s.step_size), T(s.bias2_sqrt));
  });
  check_launch("adam");
}

}  // namespace nexus::cuda
