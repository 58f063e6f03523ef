// Pieces the convolution kernels' files share (conv_kernel.cpp, conv_plane_kernel.cpp,
// conv_winograd_kernel.cpp), compiled into each CPU variant's namespace like them. Internal to
// those files.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "base/thread_pool.h"
#include "codegen/kernel_prelude.h"  // kern::relu, the op the epilogues apply
#include "ops/cpu/conv_kernel.h"
#include "ops/cpu/loops.h"  // sum_in_lanes
#include "tensor/allocator.h"
#include "tensor/tensor.h"  // Storage

namespace nexus::ops::cpu::NX_CPU_VARIANT {
namespace {

// Sums over windows, rows and the batch are carried in double for both float and double.
using Acc = double;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Positions [lo, hi) along one axis.
struct Range {
  int64_t lo, hi;
};

// The variant's native vector and how many accumulators its registers hold with KV vectors of
// output channels per block (kAccRegs[KV], see DirectConv; 0: no blocks of KV vectors, whose
// weights and sums would not fit 16 registers).
#if defined(__AVX512F__)
constexpr int64_t kVecBytes = 64, kAccRegs[4] = {0, 16, 24, 24};
#elif defined(__AVX__)
constexpr int64_t kVecBytes = 32, kAccRegs[4] = {0, 12, 12, 0};
#elif defined(__aarch64__)
constexpr int64_t kVecBytes = 16, kAccRegs[4] = {0, 16, 24, 24};
#else
constexpr int64_t kVecBytes = 16, kAccRegs[4] = {0, 12, 12, 0};
#endif

// The least work a convolution gives a task of its own, in multiply-adds (counting lanes): about
// two microseconds of one core. Below it a second thread saves little and risks much: LeNet's
// second convolution at batch 1 (240K multiply-adds) took 5.6 us on one thread, 5.1 us on two
// when the host was quiet and 9-11 us on two when it was not (the other vCPU answering late), so
// such convolutions run on the calling thread.
constexpr int64_t kTaskMadds = int64_t(1) << 19;

template <class V, class T> V load_vector(const T* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}

// n bytes from src to dst (not overlapping) in vector-sized moves, not a call: the rows a
// convolution pads are a few dozen floats, where memmove's and memset's calls cost more than
// the copy (10 % of a ResNet-style model's batch-1 time went to them).
#define NX_NO_LIBC_CALLS __attribute__((optimize("no-tree-loop-distribute-patterns")))
// The rest of a row is moved in halving steps (32, 16, 8, 4 bytes, then single bytes): a
// 14-float row is 56 bytes, less than one AVX-512 vector. src null: zeros.
template <int64_t Step>
inline void bytes_tail(char* __restrict dst, const char* __restrict src, int64_t& i, int64_t n) {
  if constexpr (Step >= 4) {
    if (i + Step <= n) {
      if (src != nullptr) std::memcpy(dst + i, src + i, Step);
      else std::memset(dst + i, 0, Step);
      i += Step;
    }
    bytes_tail<Step / 2>(dst, src, i, n);
  }
}
NX_NO_LIBC_CALLS inline void copy_bytes(char* __restrict dst, const char* __restrict src, int64_t n) {
  int64_t i = 0;
  for (; i + kVecBytes <= n; i += kVecBytes) std::memcpy(dst + i, src + i, kVecBytes);
  bytes_tail<kVecBytes / 2>(dst, src, i, n);
  for (; i < n; ++i) dst[i] = src[i];
}
NX_NO_LIBC_CALLS inline void zero_bytes(char* dst, int64_t n) {
  int64_t i = 0;
  for (; i + kVecBytes <= n; i += kVecBytes) std::memset(dst + i, 0, kVecBytes);
  bytes_tail<kVecBytes / 2>(dst, nullptr, i, n);
  for (; i < n; ++i) dst[i] = 0;
}

// Rows [r0, r1) of each of the image's planes zero-padded to (h + 2*pad_h) x (w + 2*pad_w),
// each element written once: a padding row as zeros, an inner row as its left zeros, the
// image's row and its right zeros. A thread that computes part of an image pads only the rows
// its output rows read.
template <class T>
NX_NO_LIBC_CALLS void pad_rows(const Conv2dGeometry& g, const T* x, int64_t r0, int64_t r1, T* padded) {
  const int64_t ph = g.h + 2 * g.pad_h, pw = g.w + 2 * g.pad_w, z = sizeof(T);
  for (int64_t ci = 0; ci < g.c; ++ci)
    for (int64_t r = r0; r < r1; ++r) {
      char* row = reinterpret_cast<char*>(padded + (ci * ph + r) * pw);
      const int64_t in = r - g.pad_h;
      if (in < 0 || in >= g.h) {
        zero_bytes(row, pw * z);
        continue;
      }
      zero_bytes(row, g.pad_w * z);
      copy_bytes(row + g.pad_w * z, reinterpret_cast<const char*>(x + (ci * g.h + in) * g.w), g.w * z);
      zero_bytes(row + (g.pad_w + g.w) * z, g.pad_w * z);
    }
}

}  // namespace

// What a convolution's output gets on its way out, in an inference graph whose Add and ReLU were
// folded into it: y = relu(conv + residual), residual of y's shape (or none), relu optional. The
// same expressions as the ops they replace, so the result is bit for bit theirs.
template <class T> struct Epilogue {
  const T* residual = nullptr;
  bool relu = false;

  bool any() const { return residual != nullptr || relu; }
  T operator()(T v, T res) const {
    if (residual != nullptr) v = v + res;
    return relu ? kern::relu(v) : v;
  }
  // y[0, n) in place, after a path that does not apply it as it stores (over the pool).
  void apply(T* y, int64_t n) const {
    if (!any()) return;
    parallel_for(n, kElementwiseGrain, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) y[i] = (*this)(y[i], residual != nullptr ? residual[i] : T(0));
    });
  }
};

// A kernel's weights in the form its inner loop reads (packed, transformed), n T's made by
// make(T* out): made once and kept beside a constant storage (Storage::derived, under `form` and
// where w lies in the storage), or made for this call in scratch.
template <class T> class PreparedWeights {
 public:
  template <class Make>
  PreparedWeights(Storage* constant, const T* w, std::vector<int64_t> form, int64_t n, const Make& make)
      : own_(static_cast<size_t>(constant != nullptr ? 0 : n)) {
    if (constant == nullptr) {
      make(own_.data());
      data_ = own_.data();
      return;
    }
    form.push_back(reinterpret_cast<const char*>(w) - static_cast<const char*>(constant->data()));
    kept_ = constant->derived(form, [&] {
      auto p = std::make_shared<std::vector<T>>(static_cast<size_t>(n));
      make(p->data());
      return std::shared_ptr<const void>(std::move(p));
    });
    data_ = static_cast<const std::vector<T>*>(kept_.get())->data();
  }
  const T* data() const { return data_; }

 private:
  alloc::Scratch<T> own_;
  std::shared_ptr<const void> kept_;
  const T* data_ = nullptr;
};

// Plane kernels (conv_plane_kernel.cpp): a convolution, or groups, of few output channels each,
// one output (or input) channel's plane at a time, vectorised along the output row.
template <class T> void conv2d_forward_planes(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y);
template <class T>
void conv2d_backward_planes(const Conv2dGeometry& g, const T* x, const T* w, const T* dy, T* dx, T* dw, T* dbias);

// Winograd F(2x2, 3x3) and F(4x4, 3x3) (conv_winograd_kernel.cpp): float32 3x3 convolutions at
// stride 1 whose output tiles fill this variant's vectors (winograd_forward says which).
bool winograd_forward(const Conv2dGeometry& g);
// As conv2d_forward: constant_w, the storage of a constant w (its transformed form is kept).
void conv2d_forward_winograd(const Conv2dGeometry& g, const float* x, const float* w, const float* bias, float* y,
                             Storage* constant_w, const Epilogue<float>& ep);

}  // namespace nexus::ops::cpu::NX_CPU_VARIANT
