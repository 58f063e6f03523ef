// Pieces the convolution kernels' files share (conv_kernel.cpp, conv_plane_kernel.cpp), compiled
// into each CPU variant's namespace like them. Internal to those files.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "ops/cpu/conv_kernel.h"

namespace nexus::ops::cpu::NX_CPU_VARIANT {
namespace {

// Sums over windows, rows and the batch are carried in double for both float and double.
using Acc = double;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Positions [lo, hi) along one axis.
struct Range {
  int64_t lo, hi;
};

// The variant's native vector and how many accumulators its registers hold (see DirectConv).
#if defined(__AVX512F__)
constexpr int64_t kVecBytes = 64, kAccRegs[3] = {0, 16, 24};
#elif defined(__AVX__)
constexpr int64_t kVecBytes = 32, kAccRegs[3] = {0, 12, 12};
#elif defined(__aarch64__)
constexpr int64_t kVecBytes = 16, kAccRegs[3] = {0, 16, 24};
#else
constexpr int64_t kVecBytes = 16, kAccRegs[3] = {0, 12, 12};
#endif

template <class V, class T> V load_vector(const T* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}

}  // namespace

// Plane kernels (conv_plane_kernel.cpp): a convolution, or groups, of few output channels each,
// one output (or input) channel's plane at a time, vectorised along the output row.
template <class T> void conv2d_forward_planes(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y);
template <class T>
void conv2d_backward_planes(const Conv2dGeometry& g, const T* x, const T* w, const T* dy, T* dx, T* dw, T* dbias);

}  // namespace nexus::ops::cpu::NX_CPU_VARIANT
