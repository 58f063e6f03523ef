// CudaBackend: the core's device::Backend for NVIDIA GPUs through the CUDA runtime (linked
// statically; the runtime loads the driver, libcuda.so.1, at the first call, so the extension
// imports on a machine without one). Kernels are queued on the device's stream (device_guard.h).
#pragma once

#include <array>
#include <atomic>
#include <string>

#include "allocator.h"
#include "pinned.h"
#include "device/backend.h"

namespace nexus::cuda {

class CudaBackend final : public device::Backend {
 public:
  int device_count() override;
  void check_device(int index) override;
  void* allocate(size_t nbytes, int index) override;
  void release(void* ptr, int index) override;
  void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
                  bool non_blocking) override;
  void synchronize(int index) override;
  Tensor empty_pinned(const Shape& shape, DType dtype) override;
  std::unique_ptr<device::PendingCopy> copy_to_host_async(const Tensor& dst, const Tensor& src) override;

  void cast(const Tensor& dst, const Tensor& src) override;
  void fill(const Tensor& out, double value) override;
  void unary(ops::UnaryOp op, const Tensor& out, const Tensor& x) override;
  void binary(ops::BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) override;
  void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) override;
  void reduce(ReduceOp op, const Tensor& out, const Tensor& x, const std::vector<int64_t>& axes) override;
  void argmax(const Tensor& out, const Tensor& x, int64_t rows, int64_t n) override;
  void matmul(const Tensor& out, const Tensor& a, const Tensor& b) override;
  // conv.cpp: im2col + cuBLAS for conv2d, one kernel per pooling pass.
  void conv2d_forward(const ops::Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& bias,
                      const Tensor& y) override;
  void conv2d_backward(const ops::Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy,
                       const Tensor& dx, const Tensor& dw, const Tensor& dbias) override;
  void max_pool2d_forward(const ops::Pool2dGeometry& g, const Tensor& x, const Tensor& y,
                          const Tensor& argmax) override;
  void max_pool2d_backward(const ops::Pool2dGeometry& g, const Tensor& dy, const Tensor& argmax,
                           const Tensor& dx) override;
  void avg_pool2d_forward(const ops::Pool2dGeometry& g, const Tensor& x, const Tensor& y) override;
  void avg_pool2d_backward(const ops::Pool2dGeometry& g, const Tensor& dy, const Tensor& dx) override;
  void sgd_update(int index, const std::vector<ops::cpu::OptimSegment>& segs, const ops::cpu::SgdCoeffs& c) override;
  void adam_update(int index, const std::vector<ops::cpu::OptimSegment>& segs, const ops::cpu::AdamCoeffs& c) override;
  // generated.cpp: NVRTC -> PTX (cached on disk per architecture) -> the runtime's library API.
  void launch_generated(const std::string& key, const std::function<std::string()>& source, const std::string& name,
                        const void* args, size_t nbytes, int64_t n, int index) override;

  // nccl.cpp: NCCL for data-parallel gradients between GPUs.
  std::string collective_unavailable() override;
  std::string device_uid(int index) override;
  std::string collective_id() override;
  std::unique_ptr<device::Collective> make_collective(const std::string& id, int size, int rank, int index) override;

  // Why there is no usable device ("" when there is one): no driver, a driver too old for this
  // runtime, no device. Worked out once, with device_count().
  const std::string& unavailable_reason();
  CachingAllocator& allocator() { return allocator_; }
  PinnedAllocator& pinned() { return pinned_; }

 private:
  static constexpr size_t kMaxChecked = 64;  // devices whose architecture check is remembered
  std::array<std::atomic<bool>, kMaxChecked> checked_{};
  CachingAllocator allocator_;
  PinnedAllocator pinned_;
};

// What launch_generated did in this process: kernels compiled by NVRTC, read from the disk cache,
// and launches (a kernel already loaded is neither compiled nor read again).
struct GeneratedStats {
  int64_t compiles = 0, disk_hits = 0, launches = 0;
};
GeneratedStats generated_stats();

// The process's one instance (module.cpp registers it).
CudaBackend& cuda_backend();

// "13.0" from CUDA's 13000.
std::string version_string(int version);

}  // namespace nexus::cuda
