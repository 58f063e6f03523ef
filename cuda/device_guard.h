// Small pieces of the CUDA runtime every host file here uses: an error check that throws
// DeviceError naming the call, the device a scope works on, and the stream work is queued on.
#pragma once

#include <cuda_runtime_api.h>

#include "base/error.h"

namespace nexus::cuda {

// DeviceError "CUDA error in <what>: <name> (<description>)" unless err is cudaSuccess.
inline void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) [[unlikely]] {
    (void)cudaGetLastError();
    throw DeviceError(str("CUDA error in ", what, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")"));
  }
}

// Whether the work queued before event `e` has finished (a cudaErrorNotReady is cleared from the
// runtime's last error); DeviceError for a failure.
inline bool event_done(cudaEvent_t e) {
  const cudaError_t err = cudaEventQuery(e);
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  check(err, "cudaEventQuery");
  return true;
}

// A new event (no timing) recorded on `stream` after the work queued there so far.
inline cudaEvent_t recorded_event(cudaStream_t stream) {
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  const cudaError_t err = cudaEventRecord(e, stream);
  if (err != cudaSuccess) (void)cudaEventDestroy(e);
  check(err, "cudaEventRecord");
  return e;
}

// Makes `device` current for the scope and restores the previous one after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check(cudaGetDevice(&prev_), "cudaGetDevice");
    if (prev_ != device) check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() {
    int now = prev_;
    if (cudaGetDevice(&now) == cudaSuccess && now != prev_) (void)cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0;
};

// Streams (streams.cpp). Each thread queues a device's kernels and copies on that device's
// current stream: the legacy default stream (nullptr) unless `nx.cuda.stream(s)` made another
// current for the thread. `current_stream()` is the current device's.
inline constexpr int kMaxStreamDevices = 64;
cudaStream_t current_stream();
cudaStream_t current_stream(int device);
void set_current_stream(int device, cudaStream_t stream);
// A non-blocking stream (it runs beside the legacy default stream) from a pool of 32 per device,
// created on first use and handed out in turn; they live as long as the process, so a cached
// block of the allocator never outlives the stream it belongs to (as PyTorch's stream pool).
cudaStream_t pool_stream(int device);

}  // namespace nexus::cuda
