// Renders a FusedKernel to source text in a Dialect (C++ for the host compiler, CUDA C for
// NVRTC). The op table (ops/op_table.h) names the prelude function that computes each op; a
// dialect supplies its prelude (the functions), its type names and its loop, and overrides
// nothing else. render() is a list of named steps: preamble, signature, setup (pointers and
// constants), body (loads and instructions), stores, and a reduction's epilogue.
#pragma once

#include <string>
#include <vector>

#include "codegen/fused_kernel.h"

namespace nexus::codegen {

enum class Dialect : uint8_t { Cpp, Cuda };

// The signature every generated entry point has (both dialects):
//   elementwise: void NAME(char* const* p, const int64_t* s, int64_t n, const double* c)
//     p: input pointers then output pointers, at the first element of this range;
//     s: each input's innermost stride in elements (used by Strided inputs); n: elements;
//     c: constant slot values.
//   reduction:   void NAME(char* const* p, const int64_t* s, int64_t n, const double* c, void* acc)
//     writes the range's partial (double for float registers, int64_t for integer ones) to acc.
//   reduction with side outputs (a floating sum or mean over leading axes), one row per call:
//                void NAME(char* const* p, const int64_t* s, int64_t n, const double* c, void* acc,
//                          int64_t first)
//     p: inputs, then the side outputs (contiguous), at this row's first element; acc: n
//     accumulators in the reduced register's type, set to the row's values when `first`, else
//     added to (rows in order: the eager sum over leading axes, bit for bit).
//
// The CUDA dialect of an elementwise kernel (the one a device launches) instead takes its
// arguments by value, so a launch needs no argument arrays in device memory:
//   extern "C" __global__ void NAME(NxArgs a, int64_t n)
//     n: every element of the iteration shape; thread t handles the linear indices t, t + grid...
//     a.p, a.s, a.c: as p, s, c above, at the first element of the whole iteration shape;
//     a.inner: elements per row (the innermost merged dimension, the one p/s/access describe);
//     a.nd, a.shape, a.st: the outer dimensions (innermost first) and each input's stride in
//     elements along them; a row's inputs start at sum(row index_d * st[input][d]).
//     Outputs are contiguous over the whole shape: element t is out[t].
// CudaArgs is that struct as the host fills it (same members, same order, all 8 bytes wide).
inline constexpr int kMaxKernelArgs = 16;  // inputs + outputs, and constant slots
inline constexpr int kMaxKernelDims = 7;   // outer dimensions after merging
struct CudaArgs {
  char* p[kMaxKernelArgs];
  int64_t s[kMaxKernelArgs];
  double c[kMaxKernelArgs];
  int64_t inner, nd;
  int64_t shape[kMaxKernelDims];
  int64_t st[kMaxKernelArgs][kMaxKernelDims];
};
static_assert(sizeof(CudaArgs) == 8 * (3 * kMaxKernelArgs + 2 + kMaxKernelDims * (1 + kMaxKernelArgs)),
              "CudaArgs has no padding: the generated NxArgs declares the same members");

struct Source {
  std::string name;  // the entry point's symbol
  std::string text;
};

// `key` is embedded as the symbol `nx_key` (C++) so a loaded binary can be checked against it.
Source render(const FusedKernel& k, const std::vector<Access>& access, Dialect d, const std::string& key);

// Text that changes whenever the renderer's output for a given kernel could: part of the key.
const std::string& renderer_fingerprint();
// The same for the CUDA elementwise entry point (NxArgs): part of a device kernel's key only, so
// that the C++ dialect's keys do not move when it changes.
const std::string& cuda_args_fingerprint();
// The C++ dialect's prelude (the standard headers and the functions every kernel calls), as
// render emits it after the kernel's comment: what a precompiled header may stand for.
const std::string& cpp_prelude();

}  // namespace nexus::codegen
