// What the host launchers hand to the kernels: N operands over one shape as plain structs passed by
// value (shape and per-operand strides in elements, innermost dimension first, dimensions merged
// where every operand allows), and the launch geometry of a grid-stride loop. Host and device
// read the same structs; the host functions are plain C++ so tests call them without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define NX_HOST_DEVICE __host__ __device__ __forceinline__
#define NX_UNROLL _Pragma("unroll")
#else
#define NX_HOST_DEVICE inline
#define NX_UNROLL
#endif

namespace nexus::cuda {

inline constexpr int kMaxDims = 8;  // after merging; more is a ValueError naming the shape
inline constexpr int kThreads = 256;
// A grid-stride loop needs no more blocks than fill the largest GPU a few times over
// (H200: 132 SMs x 2048 threads = 1056 blocks of 256); more only adds scheduling.
inline constexpr int64_t kMaxBlocks = 65536;

template <int N> struct Operands {
  void* ptr[N];
  int ndim;                     // 0: a single element
  bool contiguous;              // one merged dimension with stride 1 in every operand
  bool flat;                    // one merged dimension, the output's stride 1, each input's 1 or 0
                                // (a broadcast scalar): element i is at i * stride[k][0]
  int64_t shape[kMaxDims];      // shape[0] is the innermost dimension
  int64_t stride[N][kMaxDims];  // elements

  // The element offsets of linear (row-major) index i in each operand.
  NX_HOST_DEVICE void offsets(int64_t i, int64_t (&off)[N]) const {
    NX_UNROLL
    for (int k = 0; k < N; ++k) off[k] = 0;
    NX_UNROLL
    for (int d = 0; d < kMaxDims; ++d) {
      if (d >= ndim) break;
      const int64_t q = d + 1 < ndim ? i / shape[d] : 0;
      const int64_t idx = i - q * shape[d];
      NX_UNROLL
      for (int k = 0; k < N; ++k) off[k] += idx * stride[k][d];
      i = q;
    }
  }
};

// A reduction: the kept dimensions (in the output's order) and the reduced ones of x, each merged
// where possible and innermost first.
struct ReduceGeometry {
  const void* x;
  void* out;
  int64_t n_out, n_red;
  int kept_ndim, red_ndim;
  int64_t kept_shape[kMaxDims], kept_stride[kMaxDims];
  int64_t red_shape[kMaxDims], red_stride[kMaxDims];
  // Split reductions (few outputs, many elements each): each output's elements are cut into
  // `parts` chunks of `chunk` reduced by blocks of their own into `partials` (8 bytes each, one
  // accumulator), then combined in chunk order, so the result keeps its bits run to run.
  int64_t parts = 1, chunk = 0;
  void* partials = nullptr;
};

// How many chunks each output of a reduction is split into: 1 (one block per output) unless
// the outputs are too few to fill the GPU and each has many elements.
int64_t reduce_parts(int64_t n_out, int64_t n_red);

// Offset of linear index i over `ndim` dimensions (innermost first).
NX_HOST_DEVICE int64_t strided_offset(int64_t i, int ndim, const int64_t* shape, const int64_t* stride) {
  if (ndim == 1) return i * stride[0];
  int64_t off = 0;
  for (int d = 0; d < ndim; ++d) {
    const int64_t q = i / shape[d];
    off += (i - q * shape[d]) * stride[d];
    i = q;
  }
  return off;
}

struct LaunchGeometry {
  int64_t blocks;  // 0 when n is 0: launch nothing
  int threads;
};
// Blocks and threads for a grid-stride loop over n elements: enough blocks to give every element
// a thread, capped at kMaxBlocks (the loop covers the rest).
LaunchGeometry launch_geometry(int64_t n);

}  // namespace nexus::cuda
