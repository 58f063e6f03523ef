// The interpreter: runs a FusedKernel over one range exactly as a compiled entry point does
// (same signature, same arithmetic from kernel_prelude.h, same reduction order), in tiles of
// kTile elements with one vectorisable loop per instruction. It is the definition the compiled
// kernels are tested against, and the path taken when NEXUS_JIT=0 or no compiler is found.
#pragma once

#include <vector>

#include "codegen/fused_kernel.h"

namespace nexus::codegen {

inline constexpr int64_t kTile = 1024;

void interp_elementwise(const FusedKernel& k, const std::vector<Access>& access, char* const* p, const int64_t* s,
                        int64_t n, const double* c);
void interp_reduce(const FusedKernel& k, const std::vector<Access>& access, char* const* p, const int64_t* s, int64_t n,
                   const double* c, void* acc);
// A reduction with side outputs, one row (render.h): acc holds n accumulators in the register type.
void interp_reduce_row(const FusedKernel& k, const std::vector<Access>& access, char* const* p, const int64_t* s,
                       int64_t n, const double* c, void* acc, bool first);

}  // namespace nexus::codegen
