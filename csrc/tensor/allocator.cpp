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

class Cache {
 public:
  Block take(size_t nbytes) {
    size_t cls = size_class(nbytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // The smallest cached block of this class or up to two classes larger (at most 50%
      // slack): a batch that shrinks reuses the bigger buffers instead of faulting in new ones.
      for (auto it = free_.lower_bound(cls); it != free_.end() && it->first <= cls + cls / 2; ++it) {
        if (it->second.empty()) continue;
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= it->first;
        --blocks_;
        ++hits_;
        return {p, it->first};
      }
      ++misses_;
    }
    return {system_alloc(cls), cls};
  }

  void give(Block b) {
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
    return {hits_, misses_, cached_, blocks_, limit_};
  }

  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [cls, blocks] : free_)
      for (void* p : blocks) std::free(p);
    free_.clear();
    cached_ = 0;
    blocks_ = 0;
  }

 private:
  std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;  // by size class
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

// One thread's scratch stack: kStackBytes from the shared cache at the thread's first Scratch,
// returned to it when the thread exits.
struct ScratchStack {
  Block block;
  size_t top = 0;
  ~ScratchStack() {
    if (block.data != nullptr) cache().give(block);
  }
};
thread_local ScratchStack tls_stack;

}  // namespace

void* stack_push(size_t nbytes) {
  ScratchStack& s = tls_stack;
  if (nbytes > kStackBytes) return nullptr;
  const size_t size = (nbytes + kMinClass - 1) / kMinClass * kMinClass;  // keeps the next one aligned
  if (size > kStackBytes - s.top) return nullptr;
  if (s.block.data == nullptr) s.block = cache().take(kStackBytes);
  void* p = static_cast<char*>(s.block.data) + s.top;
  s.top += size;
  return p;
}

void stack_pop(void* p) { tls_stack.top = size_t(static_cast<char*>(p) - static_cast<char*>(tls_stack.block.data)); }

Block allocate(size_t nbytes) { return cache().take(nbytes); }
void release(Block b) { cache().give(b); }
Stats stats() { return cache().stats(); }
void empty_cache() { cache().clear(); }

}  // namespace nexus::alloc
