// The one intra-op thread pool. Sized by NEXUS_NUM_THREADS (default: the cores this process may
// use); BLAS follows the same count. Work is split into contiguous ranges; the calling thread takes
// part, and a parallel_for inside a worker runs inline (no nested oversubscription).
#pragma once

#include <cstdint>
#include <functional>

namespace nexus {

int num_threads();
void set_num_threads(int64_t n);  // in [1, 1024] (ValueError otherwise); also sets the BLAS thread count

// Calls fn(begin, end) over disjoint ranges covering [0, n). Runs inline when n <= grain or when
// already inside a pool worker. grain is the smallest range worth a thread (in elements).
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// True inside a parallel_for task (nested work runs inline there).
bool in_parallel_region();

// The median time, in nanoseconds, of a cache line's round trip between the calling thread and a
// second one (a ping-pong over one atomic, in batches of 64 rounds, for about 2 ms): what each
// hand-off between a parallel region's threads costs on this machine now. A virtual machine's
// vCPUs may sit on nearby or distant cores and move between them; this then grows severalfold,
// and so does the cost of splitting a small region. 0 when the process may use one CPU only.
double cpu_round_trip_ns();

// A default grain for elementwise loops: about 32K elements per task.
inline constexpr int64_t kElementwiseGrain = 32768;

}  // namespace nexus
