// Reduction kernels over compute dtypes. Layout-aware: a reduced suffix reduces rows; a reduced
// middle block of a contiguous tensor reduces as (A, R, B) vectorised along B; anything else is
// first packed into (kept..., reduced...) order.
#pragma once

#include <vector>

#include "ops/ops.h"

namespace nexus::ops::cpu {

// out: contiguous, dtype = sum -> accumulation dtype chosen by the front end; max/min -> x's.
// axes: sorted, unique, non-empty. out's element count = product of kept dims.
void reduce_kernel(ReduceOp op, const Tensor& out, const Tensor& x, const std::vector<int64_t>& axes);

// Index of the first maximum along the last axis of a contiguous (rows, n) tensor; NaN wins.
void argmax_kernel(const Tensor& out, const Tensor& x, int64_t rows, int64_t n);

}  // namespace nexus::ops::cpu
