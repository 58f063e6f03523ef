// The interpreter: runs a FusedKernel over one range exactly as a compiled entry point does
// (same signature, same arithmetic from kernel_prelude.h, same reduction order), in tiles of
// kTile elements with one vectorisable loop per instruction. It is the definition the compiled
// kernels are tested against, and the path taken when NEXUS_JIT=0 or no compiler is found.
#pragma once

#include <vector>

#include "base/cpu_variant.h"
#include "codegen/fused_kernel.h"

namespace nexus::codegen {

inline constexpr int64_t kTile = 1024;

// The entry points, one table per CPU variant (base/cpu_variant.h): interp.cpp is compiled once
// per variant, so the interpreter's arithmetic is the eager kernels' and the compiled kernels'.
struct Interp {
  void (*elementwise)(const FusedKernel& k, const std::vector<Access>& access, char* const* p, const int64_t* s,
                      int64_t n, const double* c);
  void (*reduce)(const FusedKernel& k, const std::vector<Access>& access, char* const* p, const int64_t* s, int64_t n,
                 const double* c, void* acc);
  void (*reduce_row)(const FusedKernel& k, const std::vector<Access>& access, char* const* p, const int64_t* s,
                     int64_t n, const double* c, void* acc, bool first);
};

// The active variant's (program.cpp).
const Interp& interp();

NX_CPU_VARIANT_TABLES(Interp, interp_for);

}  // namespace nexus::codegen
