// The caching device allocator (allocator.h): size classes, the per-(device, class) cache and
// the out-of-memory retry.
#include "allocator.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "base/error.h"
#include "device_guard.h"

namespace nexus::cuda {
namespace {

uint64_t cache_key(int device, size_t size) { return (uint64_t(device) << 48) | uint64_t(size / kSmallGranule); }

std::string mib(size_t bytes) { return str(bytes, " bytes (", double(bytes) / double(1 << 20), " MiB)"); }

}  // namespace

size_t size_class(size_t nbytes) {
  if (nbytes <= kSmallLimit)
    return nbytes == 0 ? kSmallGranule : (nbytes + kSmallGranule - 1) / kSmallGranule * kSmallGranule;
  if (nbytes > (size_t(1) << 56))  // rounding up must not wrap, and no device has 64 PiB
    throw MemoryError(str("cannot allocate ", nbytes, " bytes on a CUDA device: larger than any device's memory"));
  return (nbytes + kLargeGranule - 1) / kLargeGranule * kLargeGranule;
}

void* CachingAllocator::allocate(size_t nbytes, int device) {
  const size_t size = size_class(nbytes);
  std::lock_guard<std::mutex> lock(mu_);
  AllocatorStats& st = stats_[device];
  void* ptr = nullptr;
  auto it = free_.find(cache_key(device, size));
  if (it != free_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    st.cached_bytes -= size;
    ++st.hits;
  } else {
    DeviceGuard guard(device);
    cudaError_t err = cudaMalloc(&ptr, size);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // reset the last error, so later checks do not see it
      empty_cache_locked(device);
      err = cudaMalloc(&ptr, size);
    }
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      (void)cudaMemGetInfo(&free_b, &total_b);
      throw MemoryError(str("CUDA out of memory: cannot allocate ", mib(size), " on cuda:", device, " (",
                            mib(st.allocated_bytes), " in use by Nexus, ", mib(free_b), " free of ", mib(total_b),
                            ")"));
    }
    check(err, "cudaMalloc");
    ++st.misses;
  }
  live_[ptr] = {size, device};
  st.allocated_bytes += size;
  st.peak_allocated_bytes = std::max(st.peak_allocated_bytes, st.allocated_bytes);
  return ptr;
}

void CachingAllocator::release(void* ptr, int device) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  NX_ASSERT(it != live_.end(), "release of a pointer the CUDA allocator did not hand out");
  const Block b = it->second;
  live_.erase(it);
  free_[cache_key(b.device, b.size)].push_back(ptr);
  AllocatorStats& st = stats_[b.device];
  st.allocated_bytes -= b.size;
  st.cached_bytes += b.size;
}

void CachingAllocator::empty_cache_locked(int device) {
  for (auto& [key, blocks] : free_) {
    const int dev = int(key >> 48);
    if (blocks.empty() || (device >= 0 && dev != device)) continue;
    DeviceGuard guard(dev);
    for (void* p : blocks) (void)cudaFree(p);  // cudaFree waits for the device's queued work
    stats_[dev].cached_bytes -= blocks.size() * size_t(key & ((uint64_t(1) << 48) - 1)) * kSmallGranule;
    blocks.clear();
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  empty_cache_locked(-1);
}

AllocatorStats CachingAllocator::stats(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_[device];
}

}  // namespace nexus::cuda
