// Page-locked (pinned) host memory: what `Tensor.pin_memory()` and the DataLoader's device
// prefetch stage batches in, so that a host-to-device copy from it can run asynchronously (the
// DMA engine reads it while the host goes on; pageable memory is staged by the driver and the
// copy returns only when that is done). cudaHostAlloc is slow (it maps and locks pages), so
// freed blocks are cached by the device allocator's size classes. A block an asynchronous copy
// reads is not handed out again before that copy has finished (an event recorded after it).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "pending.h"

namespace nexus::cuda {

class PinnedAllocator {
 public:
  // At least nbytes of pinned host memory (64-byte aligned); MemoryError when the driver has
  // none left even after the cache is emptied.
  void* allocate(size_t nbytes);
  void release(void* ptr);
  // Whether [ptr, ptr + nbytes) lies in one block handed out here.
  bool contains(const void* ptr, size_t nbytes);
  // Work just queued on `stream` (of `device`) reads the block holding ptr: its reuse after
  // release waits for it.
  void record_use(const void* ptr, int device, cudaStream_t stream);
  void empty_cache();
  size_t cached_bytes();

 private:
  struct Block {
    size_t size;
    std::vector<cudaEvent_t> uses;  // while live: the copies that read it (record_use)
  };
  void collect_locked(bool wait);

  std::mutex mu_;
  std::map<uintptr_t, Block> live_;  // by address: contains() finds the block below a pointer
  std::unordered_map<size_t, std::vector<void*>> free_;
  PendingBlocks<size_t> waiting_;  // released while copies still read them (by size)
  size_t cached_bytes_ = 0;
};

}  // namespace nexus::cuda
