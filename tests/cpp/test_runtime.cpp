// The runtime under every op: the host allocator's block cache (tensor/allocator.h) and the intra-op
// thread pool (base/thread_pool.h).
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "check.h"
#include "engine/executor.h"
#include "graph/passes/passes.h"
#include "ops/optim.h"
#include "threads.h"
#include "tensor/allocator.h"
#include "tensor/tensor.h"

using namespace nexus;
using test::Threads;

namespace {

constexpr size_t kKiB = 1024;

bool aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

// What changed in the cache's counters since `before`.
struct Delta {
  size_t hits, misses;
};
Delta since(const alloc::Stats& before) {
  alloc::Stats now = alloc::stats();
  return {now.hits - before.hits, now.misses - before.misses};
}

}  // namespace

// ---- allocator ------------------------------------------------------------------------------

TEST(allocations_are_aligned_and_hold_what_was_asked) {
  alloc::empty_cache();
  for (size_t n :
       {size_t(0), size_t(1), size_t(100), 32 * kKiB - 1, 32 * kKiB, 100 * kKiB, 4096 * kKiB, 4096 * kKiB + 1}) {
    alloc::Block b = alloc::allocate(n);
    CHECK(b.data != nullptr);
    CHECK_LE(n, b.capacity);
    CHECK_MSG(aligned(b.data, 64), n << " bytes");
    if (n >= 4096 * kKiB) CHECK_MSG(aligned(b.data, 2048 * kKiB), n << " bytes (huge-page aligned from 4 MiB)");
    if (n > 0) {
      std::memset(b.data, 0xab, n);  // the whole capacity asked for is writable
      CHECK_EQ(static_cast<unsigned char*>(b.data)[n - 1], 0xab);
    }
    alloc::release(b);
  }
}

TEST(small_blocks_have_size_classes_of_their_own) {
  // 64-byte steps up to 256 bytes, then four classes per power of two, as for large blocks
  const std::pair<size_t, size_t> classes[] = {
      {0, 64},    {1, 64},    {64, 64},     {65, 128},    {200, 256},
      {300, 320}, {600, 640}, {4000, 4096}, {5000, 5120}, {32 * kKiB - 1, 32 * kKiB}};
  for (auto [n, cls] : classes) {
    alloc::empty_cache();
    alloc::Stats before = alloc::stats();
    alloc::Block b = alloc::allocate(n);
    CHECK_MSG(b.capacity == cls, n << " bytes: class " << b.capacity << ", expected " << cls);
    alloc::release(b);
    alloc::Block again = alloc::allocate(n);  // the block just freed
    CHECK_EQ(again.data, b.data);
    CHECK_EQ(since(before).hits, 1u);
    alloc::release(again);
  }
}

TEST(a_freed_block_is_reused_by_its_size_class) {
  alloc::empty_cache();
  CHECK_MSG(alloc::stats().limit_bytes >= 1024 * kKiB, "the cache must be on (NEXUS_ALLOC_CACHE_MB >= 1)");
  alloc::Stats before = alloc::stats();
  alloc::Block a = alloc::allocate(100 * kKiB);
  CHECK_EQ(since(before).misses, 1u);
  // Four classes per power of two: 100 KiB is in the 112 KiB class (64 KiB + 3 * 16 KiB).
  CHECK_EQ(a.capacity, 112 * kKiB);
  void* p = a.data;
  alloc::release(a);
  CHECK_EQ(alloc::stats().cached_bytes, 112 * kKiB);
  CHECK_EQ(alloc::stats().cached_blocks, 1u);

  before = alloc::stats();
  alloc::Block b = alloc::allocate(97 * kKiB);  // same class
  CHECK_EQ(since(before).hits, 1u);
  CHECK_EQ(since(before).misses, 0u);
  CHECK(b.data == p);
  CHECK_EQ(b.capacity, 112 * kKiB);
  CHECK_EQ(alloc::stats().cached_bytes, 0u);
  CHECK_EQ(alloc::stats().cached_blocks, 0u);
  alloc::release(b);
}

TEST(a_cached_block_serves_classes_up_to_half_again_smaller_only) {
  alloc::empty_cache();
  alloc::release(alloc::allocate(112 * kKiB));  // cached: one 112 KiB block

  alloc::Stats before = alloc::stats();
  alloc::Block b = alloc::allocate(80 * kKiB);  // class 80 KiB: 112 <= 80 * 1.5, reused
  CHECK_EQ(since(before).hits, 1u);
  CHECK_EQ(b.capacity, 112 * kKiB);
  alloc::release(b);

  before = alloc::stats();
  alloc::Block c = alloc::allocate(64 * kKiB);  // class 64 KiB: 112 > 96, a new block
  CHECK_EQ(since(before).misses, 1u);
  CHECK_EQ(c.capacity, 64 * kKiB);
  CHECK_EQ(alloc::stats().cached_bytes, 112 * kKiB);  // the big block is still there

  before = alloc::stats();
  alloc::Block d = alloc::allocate(200 * kKiB);  // a larger class never takes a smaller block
  CHECK_EQ(since(before).misses, 1u);
  CHECK_LE(200 * kKiB, d.capacity);
  alloc::release(c);
  alloc::release(d);
  alloc::empty_cache();
  CHECK_EQ(alloc::stats().cached_bytes, 0u);
  CHECK_EQ(alloc::stats().cached_blocks, 0u);
}

TEST(the_cache_keeps_at_most_its_limit) {
  alloc::empty_cache();
  const size_t limit = alloc::stats().limit_bytes;
  CHECK_MSG(limit > 0, "the cache must be on (NEXUS_ALLOC_CACHE_MB >= 1)");
  if (limit == 0) return;
  // Blocks of a quarter of the limit (never touched: only address space): one more than fits.
  std::vector<alloc::Block> blocks;
  size_t fits = 0;
  do {
    blocks.push_back(alloc::allocate(std::max<size_t>(limit / 4, 32 * kKiB)));
    fits = limit / blocks[0].capacity;
  } while (blocks.size() <= fits);
  const size_t cap = blocks[0].capacity;
  for (alloc::Block& b : blocks) alloc::release(b);
  CHECK_EQ(alloc::stats().cached_blocks, fits);
  CHECK_EQ(alloc::stats().cached_bytes, fits * cap);
  CHECK_LE(alloc::stats().cached_bytes, limit);
  const size_t hits = alloc::stats().hits, misses = alloc::stats().misses;
  alloc::empty_cache();
  CHECK_EQ(alloc::stats().cached_bytes, 0u);
  CHECK_EQ(alloc::stats().hits, hits);  // the counters keep counting
  CHECK_EQ(alloc::stats().misses, misses);
}

TEST(storages_come_from_the_cache_and_return_to_it) {
  alloc::empty_cache();
  void* first = nullptr;
  {
    Tensor t = Tensor::empty({50000}, DType::Float32);  // 200 KB
    first = t.raw_data();
    CHECK(aligned(first, 64));
    CHECK_EQ(alloc::stats().cached_blocks, 0u);
  }
  CHECK_EQ(alloc::stats().cached_blocks, 1u);  // freed with its last tensor
  alloc::Stats before = alloc::stats();
  Tensor u = Tensor::zeros({50000}, DType::Float32);
  CHECK_EQ(since(before).hits, 1u);
  CHECK(u.raw_data() == first);
  // a reused block is zeroed where zeros were asked for
  const float* p = u.data<float>();
  CHECK(std::all_of(p, p + 50000, [](float v) { return v == 0.0f; }));
  // live tensors never share a block
  Tensor v = Tensor::empty({50000}, DType::Float32);
  CHECK(v.raw_data() != u.raw_data());
}

// Tensor::rebind moves every handle of a tensor to another storage (a data-parallel segment);
// views made before keep the old one. An optimizer update of a parameter in a storage marked
// shared (another process's memory too) moves it to memory of its own first and leaves the
// shared memory as it was.
TEST(a_rebound_tensor_moves_for_every_handle_and_an_update_leaves_shared_memory_alone) {
  Tensor p = Tensor::zeros({4}, DType::Float32);
  Tensor handle = p;  // another handle of the same tensor (the model's, Python's)
  Tensor before = Tensor::view_of(p.storage(), 0, {4}, {1}, DType::Float32);
  std::vector<float> segment = {1, 2, 3, 4, 5, 6};
  auto shared = std::make_shared<Storage>(segment.data(), segment.size() * sizeof(float), [](void*) {});
  shared->mark_shared();
  handle.rebind(shared, 2);
  CHECK(p.storage() == shared);
  CHECK_EQ(p.data<float>()[0], 3.0f);
  CHECK_EQ(before.data<float>()[0], 0.0f);  // a view made before stays on the old storage
  CHECK_THROWS(p.rebind(shared, 3), ValueError, "cannot hold");

  ops::optim::Config c;  // plain SGD, lr 1: p -= g
  ops::optim::State s;
  Tensor g = Tensor::zeros({4}, DType::Float32);
  std::fill(g.data<float>(), g.data<float>() + 4, 1.0f);
  ops::optim::step(c, 1.0, {p}, {g}, s);
  CHECK(p.storage() != shared);
  CHECK(!p.storage()->shared());
  CHECK_EQ(p.data<float>()[0], 2.0f);
  CHECK_EQ(p.data<float>()[3], 5.0f);
  CHECK(segment == std::vector<float>({1, 2, 3, 4, 5, 6}));  // the other ranks' weights

  Tensor strided = Tensor::view_of(Tensor::zeros({4}, DType::Float32).storage(), 0, {2}, {2}, DType::Float32);
  CHECK_THROWS(strided.rebind(shared, 0), ValueError, "not contiguous");
}

// A kernel's Scratch comes from its thread's own stack while it fits: nested ones are disjoint
// and aligned, a freed one's memory is the next one's, and one larger than the stack (or than
// what is left of it) comes from the cache instead, still usable.
TEST(scratch_buffers_nest_on_the_thread_stack) {
  const void* first = nullptr;
  {
    alloc::Scratch<float> a(1000), b(5);
    first = a.data();
    CHECK(aligned(a.data(), 64) && aligned(b.data(), 64));
    CHECK(b.data() >= a.data() + 1000);  // disjoint: b after all of a
    std::fill(a.data(), a.data() + 1000, 1.0f);
    std::fill(b.data(), b.data() + 5, 2.0f);
    CHECK_EQ(a.data()[999], 1.0f);
    alloc::Scratch<char> big(alloc::kStackBytes);  // does not fit beside a and b
    CHECK(big.data() < reinterpret_cast<const char*>(first) ||
          big.data() >= reinterpret_cast<const char*>(first) + alloc::kStackBytes);
    std::memset(big.data(), 7, alloc::kStackBytes);
    CHECK_EQ(b.data()[4], 2.0f);
  }
  {
    alloc::Scratch<double> c(10);
    CHECK(static_cast<const void*>(c.data()) == first);  // the stack is empty again
  }
  // Each thread has its own: buffers of threads alive at once never overlap.
  constexpr int kThreads = 3;
  std::vector<std::pair<uintptr_t, uintptr_t>> spans(kThreads);
  std::atomic<int> arrived{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      alloc::Scratch<char> s(4096);
      std::memset(s.data(), i, 4096);
      spans[size_t(i)] = {reinterpret_cast<uintptr_t>(s.data()), reinterpret_cast<uintptr_t>(s.data()) + 4096};
      ++arrived;
      while (arrived.load() < kThreads) std::this_thread::yield();  // all alive at once
    });
  }
  for (auto& th : threads) th.join();
  for (size_t i = 0; i < kThreads; ++i)
    for (size_t j = i + 1; j < kThreads; ++j)
      CHECK_MSG(spans[i].second <= spans[j].first || spans[j].second <= spans[i].first,
                "threads " << i << " and " << j << " shared scratch memory");
}

// ---- thread pool ----------------------------------------------------------------------------

namespace {

// Runs parallel_for(n, grain) and checks that the ranges are disjoint, non-empty and cover [0, n)
// exactly once; when n <= grain (or there is one thread), one range on the calling thread.
void check_cover(int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> seen(size_t(std::max<int64_t>(n, 0)));
  std::atomic<int64_t> calls{0}, bad_ranges{0}, off_caller{0};
  const std::thread::id caller = std::this_thread::get_id();
  parallel_for(n, grain, [&](int64_t b, int64_t e) {
    ++calls;
    if (!(0 <= b && b < e && e <= n)) ++bad_ranges;
    if (std::this_thread::get_id() != caller) ++off_caller;
    for (int64_t i = std::max<int64_t>(b, 0); i < std::min(e, n); ++i) seen[size_t(i)]++;
  });
  int64_t wrong = 0;
  for (auto& s : seen) wrong += s.load() != 1;
  CHECK_MSG(wrong == 0 && bad_ranges == 0, "n " << n << " grain " << grain << " threads " << num_threads() << ": "
                                                << wrong << " indices not visited exactly once, " << bad_ranges
                                                << " bad ranges");
  if (n <= 0) CHECK_EQ(calls.load(), 0);
  if (n > 0 && (n <= std::max<int64_t>(grain, 1) || num_threads() == 1)) {
    CHECK_MSG(calls == 1 && off_caller == 0, "n " << n << " grain " << grain << ": inline on the caller");
  }
  // never more tasks than threads
  if (n > 0) CHECK_LE(calls.load(), int64_t(num_threads()));
}

}  // namespace

TEST(parallel_for_visits_every_index_exactly_once) {
  for (int threads : {1, 2, 3, 4, 7}) {
    Threads t(threads);
    CHECK_EQ(num_threads(), threads);
    for (int64_t n : {-1, 0, 1, 2, 3, 7, 8, 63, 64, 65, 1000, 32767, 32768, 32769, 100003})
      for (int64_t grain : {0, 1, 3, 64, 1000, 32768, 1 << 20}) check_cover(n, grain);
  }
}

TEST(nested_parallel_for_runs_inline_in_the_task) {
  Threads t(4);
  CHECK(!in_parallel_region());
  std::atomic<int64_t> inner_calls{0}, inner_elems{0}, outer_calls{0}, outer_in_region{0}, wrong_thread{0};
  const int64_t n = 64, m = 100000;
  parallel_for(n, 1, [&](int64_t b, int64_t e) {
    ++outer_calls;
    if (in_parallel_region()) ++outer_in_region;
    for (int64_t i = b; i < e; ++i) {
      const std::thread::id me = std::this_thread::get_id();
      parallel_for(m, 1, [&](int64_t ib, int64_t ie) {
        ++inner_calls;
        inner_elems += ie - ib;
        if (std::this_thread::get_id() != me || ib != 0 || ie != m) ++wrong_thread;
      });
    }
  });
  CHECK_EQ(outer_calls.load(), 4);  // one task per thread, the caller's included
  CHECK_EQ(outer_in_region.load(), outer_calls.load());
  CHECK_EQ(inner_calls.load(), n);  // one inline call per outer index
  CHECK_EQ(inner_elems.load(), n * m);
  CHECK_EQ(wrong_thread.load(), 0);
  CHECK(!in_parallel_region());
}

TEST(an_exception_in_a_task_reaches_the_caller) {
  Threads t(3);
  for (int64_t n : {int64_t(10), int64_t(300000)}) {  // inline, and split over the pool
    std::atomic<int64_t> done{0};
    CHECK_THROWS(parallel_for(n, 1000,
                              [&](int64_t b, int64_t e) {
                                if (b <= n / 2 && n / 2 < e) throw ValueError("task failed at the middle");
                                done += e - b;
                              }),
                 ValueError, "task failed at the middle");
    CHECK_LT(done.load(), n);
  }
  // The pool works after a failed job, and the type survives (not sliced to std::exception).
  check_cover(300000, 1000);
  CHECK_THROWS(parallel_for(300000, 1000, [](int64_t, int64_t) { throw std::out_of_range("every task"); }),
               std::out_of_range, "every task");
  check_cover(300000, 1000);
}

TEST(callers_on_many_threads_share_the_pool) {
  Threads t(3);
  std::atomic<int64_t> wrong{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&, c] {
      for (int rep = 0; rep < 50; ++rep) {
        const int64_t n = 10000 + 7919 * c + rep;
        std::vector<int> seen(size_t(n), 0);
        parallel_for(n, 500, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) ++seen[size_t(i)];
        });
        wrong += std::count_if(seen.begin(), seen.end(), [](int v) { return v != 1; });
      }
    });
  }
  for (auto& th : callers) th.join();
  CHECK_EQ(wrong.load(), 0);
}

// Workers block after a short spin (a longer one while a PoolWarm lives, or just after one
// ended); a job published as one falls asleep must still reach it, and back-to-back jobs
// (spinning workers, a late worker that finds the next job's word) must each run every chunk
// once. A lost wake-up would hang here rather than fail, so each pause is paired with a job the
// caller could finish alone: the count, not the clock, is checked.
namespace {
void check_jobs_reach_workers(std::chrono::milliseconds pause) {
  std::atomic<int64_t> wrong{0};
  const std::thread::id caller = std::this_thread::get_id();
  for (int rep = 0; rep < 3000; ++rep) {
    if (rep % 500 == 0) std::this_thread::sleep_for(pause);  // workers now asleep
    const int64_t n = 3 + rep % 5;
    std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
    parallel_for(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) seen[size_t(i)]++;
    });
    for (auto& v : seen) wrong += v.load() != 1;
  }
  CHECK_EQ(wrong.load(), 0);
  // After a pause, a job long enough for a woken worker to join is shared.
  std::this_thread::sleep_for(pause);
  std::atomic<int64_t> woken{0};
  parallel_for(2, 1, [&](int64_t, int64_t) {
    if (std::this_thread::get_id() != caller) ++woken;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);  // ends as it joins
    while (std::chrono::steady_clock::now() < until && woken.load() == 0) std::this_thread::yield();
  });
  CHECK_LE(1, woken.load());
}
}  // namespace

TEST(jobs_reach_workers_that_spin_sleep_or_wake_late) {
  Threads t(3);
  check_jobs_reach_workers(std::chrono::milliseconds(2));
}

TEST(jobs_reach_workers_while_a_pool_warm_lives_and_after) {
  Threads t(3);
  const int before = pool_warm_holds();
  {
    PoolWarm warm;
    {
      PoolWarm nested;
      CHECK_EQ(pool_warm_holds(), before + 2);
    }
    CHECK_EQ(pool_warm_holds(), before + 1);
    check_jobs_reach_workers(std::chrono::milliseconds(5));  // past the warm spin: workers asleep
  }
  CHECK_EQ(pool_warm_holds(), before);
  check_jobs_reach_workers(std::chrono::milliseconds(1));  // a hold just ended: spinning workers
}

// The executor keeps the pool warm while its nodes run, and lets it go when the run ends, also
// when a node throws.
TEST(the_executor_keeps_the_pool_warm_while_it_runs) {
  graph::Graph g;
  const int x = g.add_input("x", {4}, DType::Float32);
  graph::Attrs relu;
  relu.unary = ops::UnaryOp::Relu;
  const int y = g.add_node(graph::OpKind::Unary, {x}, relu, "relu", {4});
  const engine::Schedule s(g, nullptr, graph::live_nodes(g, {y}, int(g.nodes().size())), {y});
  engine::Executor ex(g);
  const int before = pool_warm_holds();
  int during = -1;
  ex.after_node = [&](size_t) { during = pool_warm_holds(); };
  ex.set(x, Tensor::zeros({4}, DType::Float32));
  ex.run(0, g.nodes().size(), s, /*training=*/false);
  CHECK_EQ(during, before + 1);
  CHECK_EQ(pool_warm_holds(), before);
  ex.after_node = [](size_t) { throw ValueError("a node failed"); };
  CHECK_THROWS(ex.run(0, g.nodes().size(), s, /*training=*/false), ValueError, "a node failed");
  CHECK_EQ(pool_warm_holds(), before);
}

// OpenBLAS's thread count is global, and threadpoolctl's limits set it for every OpenBLAS in the
// process: a parallel region puts it back at one before its tasks call gemm().
TEST(parallel_regions_keep_openblas_at_one_thread) {
  Threads threads(2);
  scipy_openblas_set_num_threads(2);
  parallel_for(1000, 1, [](int64_t, int64_t) {});
  CHECK(scipy_openblas_get_num_threads() == 1);
}

TEST(set_num_threads_checks_its_range) {
  const int before = num_threads();
  CHECK_THROWS(set_num_threads(0), ValueError, "[1, 1024]");
  CHECK_THROWS(set_num_threads(1025), ValueError, "[1, 1024]");
  CHECK_THROWS(set_num_threads(-3), ValueError, "got -3");
  CHECK_EQ(num_threads(), before);  // a refused size changes nothing
}

TEST(allocating_more_than_the_address_space_throws_bad_alloc) {
  // Sizes past SIZE_MAX / 2 once made the size-class loop wrap and spin forever.
  for (size_t n : {SIZE_MAX, SIZE_MAX / 2 + 1, size_t(1) << 63}) {
    bool threw = false;
    try {
      alloc::release(alloc::allocate(n));
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    CHECK_MSG(threw, "allocate(" << n << ") returned a block");
  }
}
