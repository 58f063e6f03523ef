// The caching device allocator (allocator.h): size classes, the per-(device, stream, class)
// caches, blocks waiting for other streams, and the out-of-memory retry.
#include "allocator.h"

#include <algorithm>

#include "base/error.h"
#include "device_guard.h"

namespace nexus::cuda {
namespace {

std::string mib(size_t bytes) { return str(bytes, " bytes (", double(bytes) / double(1 << 20), " MiB)"); }

}  // namespace

size_t size_class(size_t nbytes) {
  if (nbytes <= kSmallLimit)
    return nbytes == 0 ? kSmallGranule : (nbytes + kSmallGranule - 1) / kSmallGranule * kSmallGranule;
  if (nbytes > (size_t(1) << 56))  // rounding up must not wrap, and no device has 64 PiB
    throw MemoryError(str("cannot allocate ", nbytes, " bytes on a CUDA device: larger than any device's memory"));
  return (nbytes + kLargeGranule - 1) / kLargeGranule * kLargeGranule;
}

void* CachingAllocator::allocate(size_t nbytes, int device, cudaStream_t stream) {
  const size_t size = size_class(nbytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (!waiting_.empty()) collect_locked(false, -1);
  AllocatorStats& st = stats_[device];
  void* ptr = nullptr;
  auto it = free_.find(PoolKey{device, stream, size});
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
      collect_locked(true, device);
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
  live_[ptr] = {size, device, stream, {}};
  st.allocated_bytes += size;
  st.peak_allocated_bytes = std::max(st.peak_allocated_bytes, st.allocated_bytes);
  return ptr;
}

void CachingAllocator::record_stream(void* ptr, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  NX_CHECK(it != live_.end(), "record_stream: the tensor's memory does not start a block of the CUDA allocator");
  Block& b = it->second;
  if (stream != b.stream && std::find(b.others.begin(), b.others.end(), stream) == b.others.end())
    b.others.push_back(stream);
}

void CachingAllocator::release(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  NX_ASSERT(it != live_.end(), "release of a pointer the CUDA allocator did not hand out");
  const Block b = it->second;
  live_.erase(it);
  AllocatorStats& st = stats_[b.device];
  st.allocated_bytes -= b.size;
  st.cached_bytes += b.size;
  if (b.others.empty()) {
    cache_locked(ptr, b);
    return;
  }
  std::vector<cudaEvent_t> events;
  DeviceGuard guard(b.device);
  for (cudaStream_t s : b.others) events.push_back(recorded_event(s));
  waiting_.add(ptr, b, std::move(events));
}

void CachingAllocator::cache_locked(void* ptr, const Block& b) {
  free_[PoolKey{b.device, b.stream, b.size}].push_back(ptr);
}

void CachingAllocator::collect_locked(bool wait, int device) {
  waiting_.collect(
      wait, [&](const Block& b) { return device < 0 || b.device == device; },
      [&](void* ptr, const Block& b) { cache_locked(ptr, b); });
}

void CachingAllocator::empty_cache_locked(int device) {
  for (auto& [key, blocks] : free_) {
    if (blocks.empty() || (device >= 0 && key.device != device)) continue;
    DeviceGuard guard(key.device);
    for (void* p : blocks) (void)cudaFree(p);  // cudaFree waits for the device's queued work
    stats_[key.device].cached_bytes -= blocks.size() * key.size;
    blocks.clear();
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  collect_locked(false, -1);
  empty_cache_locked(-1);
}

AllocatorStats CachingAllocator::stats(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_[device];
}

}  // namespace nexus::cuda
