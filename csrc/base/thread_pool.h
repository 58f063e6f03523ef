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

// While one lives (on any thread; they nest), the pool's idle workers and a caller waiting for a
// job's end poll for up to 2 ms before they sleep, not 100 us, and so does a worker whose wait
// saw one end (the next call of a model follows after tens of microseconds of Python). A model's
// run is a string of parallel regions whose gaps (a node too small to split, the executor's
// bookkeeping, another thread that took the core for a moment) can outlast the short spin, and
// a sleeping worker then costs the run its wake-up: on a VM a few hundred microseconds, which
// was most of Nexus's slow calls at batch 1 (ResNet on 2 threads: a worker slept in 18 % of
// the calls, and about once in each of the slowest 1 %). The executor holds one for each run.
// A pool with more threads than this process's CPUs keeps the short spin (a spinning thread
// there takes a core another one needs).
class PoolWarm {
 public:
  PoolWarm();
  ~PoolWarm();
  PoolWarm(const PoolWarm&) = delete;
  PoolWarm& operator=(const PoolWarm&) = delete;
};

// The number of PoolWarm alive now (for tests).
int pool_warm_holds();

// The median time, in nanoseconds, of a cache line's round trip between the calling thread and a
// second one (a ping-pong over one atomic, in batches of 64 rounds, for about 2 ms): what each
// hand-off between a parallel region's threads costs on this machine now. A virtual machine's
// vCPUs may sit on nearby or distant cores and move between them; this then grows severalfold,
// and so does the cost of splitting a small region. 0 when the process may use one CPU only.
double cpu_round_trip_ns();

// A default grain for elementwise loops: about 32K elements per task.
inline constexpr int64_t kElementwiseGrain = 32768;

}  // namespace nexus
