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

// The stream kernels and copies are queued on: the legacy default stream of the current device
// (one place to change when streams become a user-visible choice).
inline cudaStream_t current_stream() { return nullptr; }

}  // namespace nexus::cuda
