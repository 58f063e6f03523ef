// The caching device allocator. cudaMalloc and cudaFree synchronize the device and cost tens of
// microseconds, so freed blocks stay cached and the next request of the same size class reuses
// one. Size classes as PyTorch's: requests up to 1 MiB round up to a multiple of 512 B, larger
// ones to a multiple of 2 MiB.
//
// Streams, as PyTorch's allocator treats them: a block belongs to the stream that was current
// when it was allocated, and after its release it is handed out again only to work on that
// stream, which the stream itself orders after every earlier use of the block there. A block
// also used on another stream (record_stream: a batch copied on the loader's copy stream, then
// read by the step on the default one) waits after its release until the work queued on those
// streams by then has finished (an event each), and only then returns to its stream's cache.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "pending.h"

namespace nexus::cuda {

inline constexpr size_t kSmallGranule = 512;
inline constexpr size_t kSmallLimit = size_t(1) << 20;
inline constexpr size_t kLargeGranule = size_t(2) << 20;

// The bytes a request of nbytes occupies (0 -> 512); MemoryError when rounding up would overflow.
size_t size_class(size_t nbytes);

struct AllocatorStats {
  size_t allocated_bytes = 0;  // in blocks handed out (their size classes)
  size_t cached_bytes = 0;     // in freed blocks kept for reuse (those waiting for another stream too)
  size_t peak_allocated_bytes = 0;
  int64_t hits = 0;    // requests served from the cache
  int64_t misses = 0;  // requests that called cudaMalloc
};

class CachingAllocator {
 public:
  // At least nbytes on `device` (cudaMalloc alignment, 256 B) for work on `stream`; on
  // cudaErrorMemoryAllocation the device's cache is emptied (after waiting for the blocks other
  // streams still use) and the request retried once, then MemoryError naming the bytes.
  void* allocate(size_t nbytes, int device, cudaStream_t stream);
  void release(void* ptr);
  // The block that starts at `ptr` is also used by work queued on `stream` (on its device):
  // after its release it is not reused before that work has finished. Its own stream is a no-op;
  // ValueError when ptr is not the start of a block handed out here.
  void record_stream(void* ptr, cudaStream_t stream);
  void empty_cache();  // every device's cached blocks go back to the driver
  AllocatorStats stats(int device);

 private:
  struct Block {
    size_t size;
    int device;
    cudaStream_t stream;               // the one it was allocated for
    std::vector<cudaStream_t> others;  // record_stream's
  };
  struct PoolKey {
    int device;
    cudaStream_t stream;
    size_t size;
    bool operator==(const PoolKey&) const = default;
  };
  struct PoolKeyHash {
    size_t operator()(const PoolKey& k) const {
      return std::hash<uintptr_t>()(reinterpret_cast<uintptr_t>(k.stream)) ^ (k.size * 0x9E3779B97F4A7C15ULL) ^
             size_t(k.device);
    }
  };
  void cache_locked(void* ptr, const Block& b);
  // Blocks whose other streams are done go back to their caches; wait=true first waits for them
  // (on `device`, -1: all).
  void collect_locked(bool wait, int device);
  void empty_cache_locked(int device);  // device -1: all

  std::mutex mu_;
  std::unordered_map<void*, Block> live_;
  std::unordered_map<PoolKey, std::vector<void*>, PoolKeyHash> free_;
  PendingBlocks<Block> waiting_;  // released while other streams may still use them
  std::unordered_map<int, AllocatorStats> stats_;
};

}  // namespace nexus::cuda
