// A fixed pool of workers fed through one job slot: parallel_for writes the job (a range split
// into equal chunks) and publishes it in a claim word, generation and next chunk together; workers
// and the caller claim chunks by advancing that word, and the caller waits until every chunk is
// done. Exceptions from chunks are rethrown in the caller.
//
// Each hand-off moves cache lines between cores, and on a VM whose vCPUs sit on distant cores a
// line's round trip can take 400 ns (cpu_round_trip_ns): a region should move as few as it can.
// The job and its claim word share one line (a worker reads the job in the transfer that tells
// it there is one), the count of unfinished chunks has its own, and nothing is allocated or
// locked per region (before: a shared_ptr per job, whose count both cores wrote, and a mutex
// every worker took).
//
// Waiting spins briefly before it sleeps: a training step is a string of parallel regions tens
// of microseconds apart, and waking a worker blocked on a futex costs about as much as a small
// region itself (measured: the fused optimizer update over 200K parameters took 2x longer on 2
// threads than on 1 with sleep-only workers). A worker that has just finished a job polls for
// the next one for kSpin before blocking; the caller polls for the job's end the same way. The
// spin is short so that an idle pool costs nothing and a busy machine loses little; while a
// model runs (a PoolWarm lives) and just after, it lasts kWarmSpin, as more regions are known
// to follow.
#include "base/thread_pool.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/env.h"
#include "base/error.h"
#include "ops/blas.h"

namespace nexus {
namespace {

thread_local bool tls_in_pool = false;

// The CPUs this process may run on (its affinity), at least 1.
int allowed_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

// The ranks an MPI launcher started on this node, as its environment says (MPICH's Hydra and
// Open MPI's mpirun), or 1. A value that is not a positive integer counts as 1.
int local_ranks() {
  for (const char* name : {"MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"}) {
    const char* text = std::getenv(name);
    if (text == nullptr) continue;
    char* end = nullptr;
    const long n = std::strtol(text, &end, 10);
    if (end != text && *end == '\0' && n >= 1) return int(std::min<long>(n, 1 << 20));
  }
  return 1;
}

// Unbound ranks on one node share all its cores: each takes its share (at least 1), as torchrun
// gives each process one thread, so that `mpiexec -n 4` on 8 cores runs 4 x 2 threads, not 4 x 8
// spinning on each other. A rank bound to some cores (its affinity narrower than the machine's, by
// the launcher or taskset) uses the cores it was given.
int default_threads() {
  if (std::optional<int64_t> n = knob_int("NEXUS_NUM_THREADS")) return int(*n);
  const int cpus = allowed_cpus();
  if (cpus < sysconf(_SC_NPROCESSORS_ONLN)) return cpus;
  return std::max(1, cpus / local_ranks());
}

constexpr auto kSpin = std::chrono::microseconds(100);
constexpr auto kWarmSpin = std::chrono::milliseconds(2);  // while a PoolWarm lives (thread_pool.h)

std::atomic<int> warm_holds{0};
std::atomic<uint64_t> warm_ends{0};  // PoolWarm destroyed so far

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Polls done() for up to kSpin, or up to kWarmSpin where `warm` and a PoolWarm lives or ended
// during the wait (a run that just ended is often followed by the next: the Python between two
// calls of a model takes tens of microseconds); true when it became true (false: block).
template <class Done> bool spin_until(Done done, bool warm) {
  const auto start = std::chrono::steady_clock::now();
  const uint64_t ends = warm_ends.load(std::memory_order_relaxed);
  for (int i = 1;; ++i) {
    if (done()) return true;
    cpu_relax();
    if (i % 64 == 0) {
      const auto waited = std::chrono::steady_clock::now() - start;
      if (waited <= kSpin) continue;
      const bool model_runs =
          warm_holds.load(std::memory_order_relaxed) > 0 || warm_ends.load(std::memory_order_relaxed) != ends;
      if (!warm || !model_runs || waited > kWarmSpin) return done();
    }
  }
}

// The claim word: the job's generation in the high bits, the next chunk to claim in the low ones.
constexpr int kIndexBits = 16;  // chunks per job: at most the thread count, <= 1024
constexpr uint64_t kIndexMask = (uint64_t(1) << kIndexBits) - 1;
inline uint64_t generation_of(uint64_t word) { return word >> kIndexBits; }

using Fn = std::function<void(int64_t, int64_t)>;

class Pool {
 public:
  explicit Pool(int n) { resize(n); }
  ~Pool() { stop_workers(); }

  int size() const { return size_; }

  void resize(int n) {
    std::lock_guard<std::mutex> run(run_mutex_);
    stop_workers();
    size_ = n;
    warm_ = n <= allowed_cpus();
    stop_ = false;
    for (int i = 1; i < n; ++i) workers_.emplace_back([this] { worker(); });
  }

  void run(int64_t n, int64_t chunk, const Fn& fn) {
    std::lock_guard<std::mutex> run(run_mutex_);  // one job at a time (callers from many threads)
    const uint64_t generation = ++generation_;
    slot_.fn.store(&fn, std::memory_order_relaxed);
    slot_.n.store(n, std::memory_order_relaxed);
    slot_.chunk.store(chunk, std::memory_order_relaxed);
    const int64_t chunks = (n + chunk - 1) / chunk;
    slot_.chunks.store(chunks, std::memory_order_relaxed);
    pending_.value.store(chunks, std::memory_order_relaxed);
    error_ = nullptr;
    // Chunk 0 is the caller's before anyone can claim: each thread's share of a string of regions
    // is then the same rows of each tensor (on 2 threads exactly, with workers on time), which
    // stay in its core's caches. (Claimed first-come, a waiting worker often took chunk 0 and the
    // bands swapped cores from one region to the next.)
    slot_.word.store(generation << kIndexBits | 1, std::memory_order_seq_cst);  // publishes the above
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
      }  // a worker going to sleep is now asleep
      wake_.notify_all();
    }
    work(generation, /*own=*/0);
    auto finished = [&] { return pending_.value.load(std::memory_order_seq_cst) == 0; };
    if (!spin_until(finished, warm_)) {
      std::unique_lock<std::mutex> lock(mutex_);
      caller_waits_.store(true, std::memory_order_seq_cst);
      done_.wait(lock, finished);
      caller_waits_.store(false, std::memory_order_relaxed);
    }
    if (error_) std::rethrow_exception(error_);  // written before its chunk's pending decrement
  }

 private:
  void worker() {
    tls_in_pool = true;
    uint64_t seen = generation_of(slot_.word.load(std::memory_order_acquire));
    auto published = [&] {
      return stop_.load(std::memory_order_relaxed) || generation_of(slot_.word.load(std::memory_order_seq_cst)) != seen;
    };
    for (;;) {
      if (!spin_until(published, warm_)) {
        std::unique_lock<std::mutex> lock(mutex_);
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        wake_.wait(lock, published);
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
      }
      if (stop_.load(std::memory_order_relaxed)) return;
      seen = generation_of(slot_.word.load(std::memory_order_acquire));
      work(seen);
    }
  }

  // Runs chunk `own` if there is one (the caller's, claimed as it published), then claims and
  // runs chunks of job `generation` until none is left (or a later job is up: this one is then
  // finished). The job's fields are read before the claim that confirms the word has not moved:
  // while a chunk of this job is unclaimed, the caller cannot have started the next one, so a
  // successful claim means they were this job's.
  void work(uint64_t generation, int64_t own = -1) {
    const bool was = tls_in_pool;
    tls_in_pool = true;
    int64_t finished = 0;
    if (own >= 0) {
      run_chunk(*slot_.fn.load(std::memory_order_relaxed), own, slot_.n.load(std::memory_order_relaxed),
                slot_.chunk.load(std::memory_order_relaxed));
      ++finished;
    }
    uint64_t word = slot_.word.load(std::memory_order_acquire);
    for (;;) {
      if (generation_of(word) != generation) break;
      const int64_t index = int64_t(word & kIndexMask);
      const Fn* fn = slot_.fn.load(std::memory_order_relaxed);
      const int64_t n = slot_.n.load(std::memory_order_relaxed), chunk = slot_.chunk.load(std::memory_order_relaxed);
      if (index >= slot_.chunks.load(std::memory_order_relaxed)) break;
      if (!slot_.word.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel, std::memory_order_acquire))
        continue;  // word now holds the current value
      run_chunk(*fn, index, n, chunk);
      ++finished;
      word = slot_.word.load(std::memory_order_acquire);
    }
    tls_in_pool = was;
    if (finished && pending_.value.fetch_sub(finished, std::memory_order_seq_cst) == finished &&
        caller_waits_.load(std::memory_order_seq_cst)) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
      }  // the caller is now in its wait
      done_.notify_all();
    }
  }

  void run_chunk(const Fn& fn, int64_t index, int64_t n, int64_t chunk) {
    const int64_t begin = index * chunk;
    try {
      fn(begin, std::min(n, begin + chunk));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  // The job: written by the caller, read by every worker (one line).
  struct alignas(64) Slot {
    std::atomic<uint64_t> word{0};  // generation << kIndexBits | the next chunk to claim
    std::atomic<const Fn*> fn{nullptr};
    std::atomic<int64_t> n{0}, chunk{1}, chunks{0};
  };
  struct alignas(64) Counter {
    std::atomic<int64_t> value{0};
  };

  Slot slot_;
  Counter pending_;           // the job's chunks not yet finished
  uint64_t generation_ = 0;   // the last job published (under run_mutex_)
  std::exception_ptr error_;  // the job's first exception (written under mutex_)
  alignas(64) std::mutex run_mutex_, mutex_;
  std::condition_variable wake_, done_;
  std::atomic<int> sleepers_{0};  // workers blocked on wake_ (or about to be)
  std::atomic<bool> caller_waits_{false};
  std::vector<std::thread> workers_;
  int size_ = 1;
  bool warm_ = true;  // a PoolWarm lengthens the spin: no more threads than CPUs (set in resize)
  std::atomic<bool> stop_{false};
};

Pool& pool() {
  static Pool* p = [] {
    int n = default_threads();
    ops::blas_set_num_threads(n);
    return new Pool(n);  // never destroyed: workers may outlive static destruction order
  }();
  return *p;
}

}  // namespace

int num_threads() { return pool().size(); }

bool in_parallel_region() { return tls_in_pool; }

PoolWarm::PoolWarm() { warm_holds.fetch_add(1, std::memory_order_relaxed); }
PoolWarm::~PoolWarm() {
  warm_ends.fetch_add(1, std::memory_order_relaxed);
  warm_holds.fetch_sub(1, std::memory_order_relaxed);
}
int pool_warm_holds() { return warm_holds.load(std::memory_order_relaxed); }

void set_num_threads(int64_t n) {
  NX_CHECK(n >= 1 && n <= 1024, "set_num_threads: expected an integer in [1, 1024], got ", n);
  pool().resize(int(n));
  ops::blas_set_num_threads(int(n));
}

double cpu_round_trip_ns() {
  if (allowed_cpus() < 2) return 0;
  using Clock = std::chrono::steady_clock;
  constexpr int kRounds = 64;                // per timed batch
  alignas(64) std::atomic<int64_t> ball{0};  // odd: the partner's turn to answer with ball + 1
  std::atomic<bool> stop{false};
  std::thread partner([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      const int64_t v = ball.load(std::memory_order_acquire);
      if (v % 2 == 1) ball.store(v + 1, std::memory_order_release);
      else cpu_relax();
    }
  });
  // Both threads may share one CPU while the others are busy: the waits give up 50 ms in, and
  // the time so far is the answer.
  const auto start = Clock::now(), soft = start + std::chrono::milliseconds(2),
             hard = start + std::chrono::milliseconds(50);
  std::vector<double> batches;
  int64_t v = 0;
  bool late = false;
  while (!late && batches.size() < 256 && (batches.size() < 8 || Clock::now() < soft)) {
    const auto t0 = Clock::now();
    for (int r = 0; r < kRounds && !late; ++r) {
      ball.store(++v, std::memory_order_release);
      ++v;
      for (int i = 1; ball.load(std::memory_order_acquire) != v; ++i) {
        cpu_relax();
        if (i % 256 == 0 && Clock::now() > hard) {
          late = true;
          break;
        }
      }
    }
    if (!late) batches.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / kRounds);
  }
  stop = true;
  partner.join();
  if (batches.empty()) return std::chrono::duration<double, std::nano>(Clock::now() - start).count();
  std::nth_element(batches.begin(), batches.begin() + batches.size() / 2, batches.end());
  return batches[batches.size() / 2];
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  Pool& p = pool();
  int threads = p.size();
  if (tls_in_pool || threads == 1 || n <= grain) {
    fn(0, n);
    return;
  }
  ops::blas_single_threaded();  // tasks may call gemm(): OpenBLAS must not start threads of its own
  int64_t tasks = std::min<int64_t>(threads, (n + grain - 1) / grain);
  p.run(n, (n + tasks - 1) / tasks, fn);
}

}  // namespace nexus
