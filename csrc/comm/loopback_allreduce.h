// Runs a ring all-reduce on N ranks as threads over one loopback Hub: the test harness of
// STYLE habit 8, also usable from C++ tests and the Python test surface (nexus._C.comm).
#pragma once

#include <vector>

#include "comm/ring.h"
#include "tensor/dtype.h"

namespace nexus::comm {

// One rank's buffer: float32 or float64, n contiguous elements, reduced in place.
struct RankBuffer {
  void* data;
  DType dtype;
  size_t n;
};

// Rank i reduces buffers[i] (with residuals[i] when given: empty, or one per rank, entries may be
// null). Ranks listed in `absent` never join: the others must fail within opts.timeout. A rank
// that throws aborts the group so the rest stop waiting. Afterwards the first error that is not a
// CommError is rethrown as is; otherwise the CommErrors of all failed ranks are combined into one.
std::vector<AllReduceStats> loopback_allreduce(const std::vector<RankBuffer>& buffers, const AllReduceOptions& opts,
                                               const std::vector<Residual*>& residuals = {},
                                               const std::vector<int>& absent = {});

}  // namespace nexus::comm
