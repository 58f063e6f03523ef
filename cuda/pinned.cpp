// Pinned host memory (pinned.h): cudaHostAlloc'd blocks cached by size class, held back while
// asynchronous copies read them.
#include "pinned.h"

#include "allocator.h"
#include "base/error.h"
#include "device_guard.h"

namespace nexus::cuda {

void* PinnedAllocator::allocate(size_t nbytes) {
  const size_t size = size_class(nbytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (!waiting_.empty()) collect_locked(false);
  void* ptr = nullptr;
  auto it = free_.find(size);
  if (it != free_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= size;
  } else {
    cudaError_t err = cudaHostAlloc(&ptr, size, cudaHostAllocPortable);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      collect_locked(true);
      for (auto& [sz, blocks] : free_) {
        for (void* p : blocks) (void)cudaFreeHost(p);
        cached_bytes_ -= blocks.size() * sz;
        blocks.clear();
      }
      err = cudaHostAlloc(&ptr, size, cudaHostAllocPortable);
    }
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw MemoryError(str("cannot allocate ", size, " bytes of pinned (page-locked) host memory; the system's ",
                            "limit on locked memory may be lower (ulimit -l)"));
    }
    check(err, "cudaHostAlloc");
  }
  live_[reinterpret_cast<uintptr_t>(ptr)] = {size, {}};
  return ptr;
}

void PinnedAllocator::release(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(reinterpret_cast<uintptr_t>(ptr));
  NX_ASSERT(it != live_.end(), "release of a pointer the pinned allocator did not hand out");
  Block b = std::move(it->second);
  live_.erase(it);
  cached_bytes_ += b.size;
  if (b.uses.empty()) free_[b.size].push_back(ptr);
  else waiting_.add(ptr, b.size, std::move(b.uses));
}

bool PinnedAllocator::contains(const void* ptr, size_t nbytes) {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.upper_bound(p);
  if (it == live_.begin()) return false;
  --it;
  return p >= it->first && p + nbytes <= it->first + it->second.size;
}

void PinnedAllocator::record_use(const void* ptr, int device, cudaStream_t stream) {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.upper_bound(p);
  NX_ASSERT(it != live_.begin(), "record_use of memory the pinned allocator did not hand out");
  --it;
  std::vector<cudaEvent_t>& uses = it->second.uses;  // a staging buffer reused for copy after copy:
  std::erase_if(uses, [](cudaEvent_t done) {         // forget the copies that are over
    if (!event_done(done)) return false;
    (void)cudaEventDestroy(done);
    return true;
  });
  DeviceGuard guard(device);
  uses.push_back(recorded_event(stream));
}

void PinnedAllocator::collect_locked(bool wait) {
  waiting_.collect(wait, [](size_t) { return true; }, [&](void* ptr, size_t size) { free_[size].push_back(ptr); });
}

void PinnedAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  collect_locked(false);
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) (void)cudaFreeHost(p);
    cached_bytes_ -= blocks.size() * size;
    blocks.clear();
  }
}

size_t PinnedAllocator::cached_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_bytes_;
}

}  // namespace nexus::cuda
