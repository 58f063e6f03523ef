#include "tensor/allocator.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/error.h"

namespace nexus::alloc {
namespace {

constexpr size_t kMinClass = 64;  // the smallest size class (one cache line)
constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kHugeThreshold = size_t(4) << 20;  // from here: 2 MiB aligned, MADV_HUGEPAGE

}  // namespace

// Four classes per power of two (at most 25% slack) from 256 bytes: 64, 128, 192, 256, 320, 384,
// 448, 512, 640, ..., 32K, 40K, 48K, ...
size_t size_class(size_t n) {
  if (n > SIZE_MAX / 2) throw std::bad_alloc();  // more than the address space; rounding up would wrap
  size_t p = kMinClass;
  while (p <= n / 2) p *= 2;
  size_t step = std::max(kMinClass, p / 4);
  return (std::max<size_t>(n, 1) + step - 1) / step * step;
}

namespace {

size_t cache_limit() { return size_t(knob_int("NEXUS_ALLOC_CACHE_MB").value_or(0)) << 20; }

void* system_alloc(size_t capacity) {
  size_t align = capacity >= kHugeThreshold ? kHugePage : 64;
  size_t padded = (capacity + align - 1) / align * align;
  void* p = std::aligned_alloc(align, padded);
  if (!p) throw std::bad_alloc();
  if (align == kHugePage) madvise(p, padded, MADV_HUGEPAGE);  // advisory; failure is harmless
  return p;
}

class Cache;
Cache& cache();

// Each thread keeps a few freed small blocks for itself: a kernel's scratch, freed and taken again
// by the thread that wrote it, is still in that core's caches, where a block from the shared lists
// last written by another thread comes over from that core line by line (the ResNet-style CNN at
// batch 1 on 2 threads: 257 -> 234 us in periods when a cache line's round trip between the two
// vCPUs took 370 ns instead of 100; 134 -> 133 us when it took 100). Blocks of up to kLocalMax,
// at most kLocalPerClass of a class and local_bytes() in all, for up to kLocalThreads threads at
// once: what the threads keep is at most a quarter of the cache's limit, on top of the shared
// lists. The rest goes to the shared lists.
constexpr size_t kLocalMax = size_t(256) << 10;
constexpr size_t kLocalPerClass = 4;
constexpr size_t kLocalThreads = 64;
size_t local_bytes(size_t limit) { return std::min(size_t(4) << 20, limit / (4 * kLocalThreads)); }

using FreeLists = std::map<size_t, std::vector<void*>>;  // cached blocks by size class

// A cached block of class cls or up to two classes larger (at most 50% slack), or none: a batch
// that shrinks reuses the bigger buffers instead of faulting in new ones.
Block take_cached(FreeLists& free, size_t cls) {
  for (auto it = free.lower_bound(cls); it != free.end() && it->first <= cls + cls / 2; ++it) {
    if (it->second.empty()) continue;
    void* p = it->second.back();
    it->second.pop_back();
    return {p, it->first};
  }
  return {};
}

struct LocalCache {
  std::mutex mutex;  // uncontended: the owner's takes and gives; stats() and clear() from others
  FreeLists free;
  size_t bytes = 0, blocks = 0, hits = 0;
  size_t most = 0;  // local_bytes() of the cache's limit

  Block take(size_t cls) {  // under mutex
    Block b = take_cached(free, cls);
    if (b.data != nullptr) bytes -= b.capacity, --blocks;
    return b;
  }
};

class Cache {
 public:
  Block take(size_t nbytes, LocalCache* local) {
    size_t cls = size_class(nbytes);
    if (local != nullptr && cls <= kLocalMax) {
      std::lock_guard<std::mutex> lock(local->mutex);
      if (Block b = local->take(cls); b.data != nullptr) {
        ++local->hits;
        return b;
      }
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (Block b = take_cached(free_, cls); b.data != nullptr) {
        cached_ -= b.capacity;
        --blocks_;
        ++hits_;
        return b;
      }
      // Then another thread's own blocks, before fresh memory: work that moves between threads
      // (the text readers' ranges) would otherwise leave its blocks with the thread that freed them.
      for (LocalCache* other : locals_) {
        if (other == local || cls > kLocalMax) continue;
        std::lock_guard<std::mutex> own(other->mutex);
        if (Block b = other->take(cls); b.data != nullptr) {
          ++hits_;
          return b;
        }
      }
      ++misses_;
    }
    return {system_alloc(cls), cls};
  }

  void give(Block b, LocalCache* local) {
    if (limit_ == 0) return std::free(b.data);
    if (local != nullptr && b.capacity <= kLocalMax) {
      std::lock_guard<std::mutex> lock(local->mutex);
      std::vector<void*>& same = local->free[b.capacity];
      if (same.size() < kLocalPerClass && local->bytes + b.capacity <= local->most) {
        same.push_back(b.data);
        local->bytes += b.capacity;
        ++local->blocks;
        return;
      }
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_ + b.capacity <= limit_) {
        free_[b.capacity].push_back(b.data);
        cached_ += b.capacity;
        ++blocks_;
        return;
      }
    }
    std::free(b.data);
  }

  Stats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    Stats s{hits_, misses_, cached_, blocks_, limit_};
    for (LocalCache* local : locals_) {
      std::lock_guard<std::mutex> own(local->mutex);
      s.hits += local->hits;
      s.cached_bytes += local->bytes;
      s.cached_blocks += local->blocks;
    }
    return s;
  }

  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (LocalCache* local : locals_) {
      std::lock_guard<std::mutex> own(local->mutex);
      for (auto& [cls, blocks] : local->free)
        for (void* p : blocks) std::free(p);
      local->free.clear();
      local->bytes = local->blocks = 0;
    }
    for (auto& [cls, blocks] : free_)
      for (void* p : blocks) std::free(p);
    free_.clear();
    cached_ = 0;
    blocks_ = 0;
  }

  // A thread's cache joins at its first use (while the cache is on and fewer than kLocalThreads
  // have one) and leaves when the thread ends: its blocks and hits go to the shared lists and
  // counters.
  LocalCache* join() {
    if (local_bytes(limit_) == 0) return nullptr;
    std::lock_guard<std::mutex> lock(mutex_);
    if (locals_.size() >= kLocalThreads) return nullptr;
    auto* local = new LocalCache();
    local->most = local_bytes(limit_);
    locals_.push_back(local);
    return local;
  }
  void leave(LocalCache* local) {
    std::lock_guard<std::mutex> lock(mutex_);
    locals_.erase(std::find(locals_.begin(), locals_.end(), local));
    hits_ += local->hits;
    for (auto& [cls, blocks] : local->free)
      for (void* p : blocks) {
        if (cached_ + cls > limit_) {  // the shared lists stay within the limit
          std::free(p);
          continue;
        }
        free_[cls].push_back(p);
        cached_ += cls;
        ++blocks_;
      }
    delete local;
  }

 private:
  std::mutex mutex_;
  FreeLists free_;
  std::vector<LocalCache*> locals_;  // the live threads' caches
  size_t cached_ = 0;
  size_t blocks_ = 0;
  size_t hits_ = 0;
  size_t misses_ = 0;
  size_t limit_ = cache_limit();
};

// Never destroyed: storages released during static destruction still find it.
Cache& cache() {
  static Cache* c = new Cache();
  return *c;
}

// This thread's cache: made at first use, given back by its Leaver when the thread ends. Plain
// pointers and a flag (trivially destructible) so that a block freed after the thread's
// thread_local objects are gone (from a static destructor at exit) goes to the shared lists.
thread_local LocalCache* tls_local = nullptr;
thread_local bool tls_left = false;
struct Leaver {
  ~Leaver() {
    if (tls_local != nullptr) cache().leave(tls_local);
    tls_local = nullptr;
    tls_left = true;
  }
};

LocalCache* local_cache() {
  if (tls_local == nullptr && !tls_left) {
    thread_local Leaver leaver;  // constructed here, once per thread: its destructor runs at thread exit
    tls_local = cache().join();
    if (tls_local == nullptr) tls_left = true;  // the cache is off, or enough threads keep blocks
  }
  return tls_local;
}

}  // namespace

Block allocate(size_t nbytes) { return cache().take(nbytes, local_cache()); }
void release(Block b) { cache().give(b, local_cache()); }
Stats stats() { return cache().stats(); }
void empty_cache() { cache().clear(); }

}  // namespace nexus::alloc
