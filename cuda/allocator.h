// The caching device allocator. cudaMalloc and cudaFree synchronize the device and cost tens of
// microseconds, so freed blocks stay cached per (device, size class) and the next request of
// that class reuses one. Size classes as PyTorch's: requests up to 1 MiB round up to a multiple
// of 512 B, larger ones to a multiple of 2 MiB. Every kernel runs on the device's one stream, so
// a block freed while a kernel still reads it is only handed out to work queued after that kernel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace nexus::cuda {

inline constexpr size_t kSmallGranule = 512;
inline constexpr size_t kSmallLimit = size_t(1) << 20;
inline constexpr size_t kLargeGranule = size_t(2) << 20;

// The bytes a request of nbytes occupies (0 -> 512); MemoryError when rounding up would overflow.
size_t size_class(size_t nbytes);

struct AllocatorStats {
  size_t allocated_bytes = 0;  // in blocks handed out (their size classes)
  size_t cached_bytes = 0;     // in freed blocks kept for reuse
  size_t peak_allocated_bytes = 0;
  int64_t hits = 0;    // requests served from the cache
  int64_t misses = 0;  // requests that called cudaMalloc
};

class CachingAllocator {
 public:
  // At least nbytes on `device` (cudaMalloc alignment, 256 B); on cudaErrorMemoryAllocation the
  // device's cache is emptied and the request retried once, then MemoryError naming the bytes.
  void* allocate(size_t nbytes, int device);
  void release(void* ptr, int device);
  void empty_cache();  // every device's cached blocks go back to the driver
  AllocatorStats stats(int device);

 private:
  struct Block {
    size_t size;
    int device;
  };
  void empty_cache_locked(int device);  // device -1: all

  std::mutex mu_;
  std::unordered_map<void*, Block> live_;
  // key: (device << 48) | size class index; value: cached blocks of that class
  std::unordered_map<uint64_t, std::vector<void*>> free_;
  std::unordered_map<int, AllocatorStats> stats_;
};

}  // namespace nexus::cuda
