// The thread's current stream per device, and the pool of non-blocking streams (device_guard.h).
#include <array>
#include <mutex>

#include "device_guard.h"

namespace nexus::cuda {
namespace {

thread_local std::array<cudaStream_t, kMaxStreamDevices> current{};  // nullptr: legacy default

int checked_index(int device) {
  NX_CHECK(device >= 0 && device < kMaxStreamDevices, "CUDA stream: device index ", device, " out of range [0, ",
           kMaxStreamDevices, ")");
  return device;
}

}  // namespace

cudaStream_t current_stream() {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  return current_stream(device);
}

cudaStream_t current_stream(int device) { return current[size_t(checked_index(device))]; }

void set_current_stream(int device, cudaStream_t stream) { current[size_t(checked_index(device))] = stream; }

cudaStream_t pool_stream(int device) {
  constexpr int kPool = 32;
  static std::mutex mu;
  static std::array<std::array<cudaStream_t, kPool>, kMaxStreamDevices> pool{};
  static std::array<int, kMaxStreamDevices> next{};
  std::lock_guard<std::mutex> lock(mu);
  const size_t d = size_t(checked_index(device));
  const size_t i = size_t(next[d]++ % kPool);
  if (!pool[d][i]) {
    DeviceGuard guard(device);
    check(cudaStreamCreateWithFlags(&pool[d][i], cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
  return pool[d][i];
}

}  // namespace nexus::cuda
