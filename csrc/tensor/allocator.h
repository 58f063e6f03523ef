// The host allocator behind every owned Storage (and the text readers' columns): a size-class
// cache of large blocks.
//
// A training step allocates the same activation and gradient sizes every step. Fresh blocks of
// 32 KiB and more come from mmap, and their first touch costs a page fault per 4 KiB: measured
// in the 784-256-10 MLP step, that zero-filling was a sizeable share of the time outside the
// GEMMs. Freed blocks are therefore kept, per size class, and handed out again; the cache is
// bounded (NEXUS_ALLOC_CACHE_MB; 0 turns it off). Small blocks too: an inference call at batch 1
// allocates dozens of a few KiB, and 64-byte aligned ones bypass malloc's fast per-thread lists
// (measured: a tenth of LeNet's batch-1 latency in malloc and free).
#pragma once

#include <cstddef>

namespace nexus::alloc {

struct Block {
  void* data = nullptr;
  size_t capacity = 0;  // the size class the block was allocated at (>= the bytes asked for)
};

// At least nbytes, 64-byte aligned (2 MiB aligned and advised as huge pages from 4 MiB).
// Throws std::bad_alloc when the system has no memory left.
Block allocate(size_t nbytes);
void release(Block b);
size_t size_class(size_t nbytes);  // the capacity allocate(nbytes) rounds up to

// What the cache did since the process started.
struct Stats {
  size_t hits = 0;           // allocations served by a cached block
  size_t misses = 0;         // allocations that went to the system
  size_t cached_bytes = 0;   // held for reuse, not in use
  size_t cached_blocks = 0;  // how many blocks make up cached_bytes
  size_t limit_bytes = 0;    // NEXUS_ALLOC_CACHE_MB in bytes (0: the cache is off)
};
Stats stats();
void empty_cache();  // returns every cached block to the system (the counters keep counting)

// A kernel's temporary buffer of n T's, uninitialised (a std::vector would zero it, and a fresh
// malloc of megabytes would fault its pages in on every call). Up to kStackBytes a thread holds
// at once come from that thread's own stack of scratch memory, which stays in its core's caches;
// larger ones (and any beyond it) from the shared cache. Through the shared cache a parallel
// region's tasks traded blocks, each writing lines the other core last held (the ResNet-style
// CNN of benchmarks/inference.py at batch 1 on 2 threads: 139 -> 134 us, and 234 -> 217 us while
// the VM's vCPUs sat far apart). Scratch objects are scoped, so a thread frees its own in
// reverse order.
inline constexpr size_t kStackBytes = size_t(1) << 20;
void* stack_push(size_t nbytes);  // null when the thread's stack has no room left
void stack_pop(void* p);          // p: this thread's last push not yet popped

template <class T> class Scratch {
 public:
  explicit Scratch(size_t n) {
    void* p = stack_push(n * sizeof(T));
    block_ = p != nullptr ? Block{p, 0} : allocate(n * sizeof(T));
  }
  ~Scratch() {
    if (block_.capacity == 0) stack_pop(block_.data);
    else release(block_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T* data() const { return static_cast<T*>(block_.data); }

 private:
  Block block_;  // capacity 0: on the thread's stack
};

// A std::vector allocator over the same cache, for containers that grow to megabytes (the text
// readers' columns): their memory comes back as huge pages from the cache instead of being
// faulted in 4 KiB at a time on every read.
template <class T> struct CachedAllocator {
  using value_type = T;
  CachedAllocator() = default;
  template <class U> CachedAllocator(const CachedAllocator<U>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(nexus::alloc::allocate(n * sizeof(T)).data); }
  // The block goes back under the class of the bytes asked for: a block served from a larger
  // class is only filed smaller than it is.
  void deallocate(T* p, size_t n) noexcept { release({p, size_class(n * sizeof(T))}); }
  template <class U> bool operator==(const CachedAllocator<U>&) const noexcept { return true; }
};

}  // namespace nexus::alloc
