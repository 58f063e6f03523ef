// The seam between the core and a device backend. The core includes no CUDA header: a backend
// (cuda/, built as the extension nexus._C_cuda) implements this interface and registers itself
// when it is loaded; the op front ends in ops/ send the kernels of non-host tensors here.
//
// Every kernel receives what the CPU kernels in ops/cpu receive: operands on one device of this
// backend, already broadcast to the output's shape (views with stride 0 where broadcast) and in
// their compute dtype (no float16/bfloat16 except in cast); outputs are freshly allocated and
// contiguous unless the comment says otherwise. Kernels may run asynchronously on the device's
// current stream; copies to the host return when the bytes are there.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/reduce_op.h"
#include "ops/cpu/conv_kernel.h"
#include "ops/cpu/optim_kernel.h"
#include "ops/op_kind.h"
#include "tensor/device.h"
#include "tensor/tensor.h"

namespace nexus::device {

// Collective communication between processes with one device each, over the device's own
// library (NCCL for CUDA): what data-parallel training uses when every rank's model is on such
// a device, instead of copying the gradients to the host for the MPI ring.
class Collective {
 public:
  virtual ~Collective() = default;
  // Each defined tensor of `grads` (contiguous, on this communicator's device, one float dtype)
  // becomes, in place, the sum over the processes of weight_p * grads_p; queued on the device's
  // current stream. Every process passes the same shapes and dtype in the same order.
  virtual void weighted_sum(const std::vector<Tensor>& grads, double weight) = 0;
};

// A copy queued by Backend::copy_to_host_async.
class PendingCopy {
 public:
  virtual ~PendingCopy() = default;
  virtual bool done() = 0;  // the bytes are on the host
  virtual void wait() = 0;  // returns when they are
};

class Backend {
 public:
  virtual ~Backend() = default;

  // ---- devices and memory ----
  virtual int device_count() = 0;  // 0 where there is no driver or no device; never throws
  // Throws RuntimeError saying what is missing (no driver, no device, index out of range).
  virtual void check_device(int index) = 0;
  // At least nbytes on device `index`, 256-byte aligned; MemoryError naming the size when the
  // device has no memory left even after the cache is emptied.
  virtual void* allocate(size_t nbytes, int index) = 0;
  virtual void release(void* ptr, int index) = 0;
  // Contiguous bytes between any two places (host or a device of this backend), queued on the
  // device's current stream; returns when the destination holds them where the destination is
  // the host, and when the source may be reused where it is the host, unless non_blocking and
  // the source is the backend's pinned host memory (it then keeps that memory from reuse until
  // the copy is done).
  virtual void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
                          bool non_blocking) = 0;
  virtual void synchronize(int index) = 0;
  // A host tensor of that shape and dtype in page-locked memory, which copies to and from a
  // device read and write without staging (so they can run while the host goes on).
  virtual Tensor empty_pinned(const Shape& shape, DType dtype) = 0;
  // Queues a copy of device tensor src into host tensor dst (both contiguous, same bytes; dst
  // from empty_pinned) on a copy stream, after the work queued so far on src's device's current
  // stream, and returns at once: backward goes on while the copy engine moves what it finished.
  // src's memory is not reused before the copy has read it.
  virtual std::unique_ptr<PendingCopy> copy_to_host_async(const Tensor& dst, const Tensor& src) = 0;

  // ---- kernels ----
  virtual void cast(const Tensor& dst, const Tensor& src) = 0;  // any dtypes, same shape; dst may be strided
  virtual void fill(const Tensor& out, double value) = 0;
  virtual void unary(ops::UnaryOp op, const Tensor& out, const Tensor& x) = 0;
  virtual void binary(ops::BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) = 0;
  virtual void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) = 0;
  // out: the kept dims' shape (keepdims or not), contiguous; axes: sorted, unique, non-empty;
  // Sum/Max/Min. Sums add in a fixed order (the same result run to run).
  virtual void reduce(ReduceOp op, const Tensor& out, const Tensor& x, const std::vector<int64_t>& axes) = 0;
  // Index of the first maximum along the last axis of a contiguous (rows, n) tensor; NaN wins.
  virtual void argmax(const Tensor& out, const Tensor& x, int64_t rows, int64_t n) = 0;
  // out = a @ b per batch: a (batch..., m, k), b (batch..., k, n) with equal batch dims (views,
  // maybe transposed or broadcast), out (batch..., m, n) contiguous; all three of one floating
  // dtype: float16 and bfloat16 too (a device multiplies them at their width, accumulating in
  // float32, and rounds the result once, as the host's float32 staging does).
  virtual void matmul(const Tensor& out, const Tensor& a, const Tensor& b) = 0;

  // 2-D convolution and pooling, as the host kernels of ops/cpu/conv_kernel.h (their comments
  // give the conventions), on contiguous NCHW tensors of one float dtype (float32 or float64).
  // bias and the gradients may be undefined (skipped); gradients are overwritten, not added to.
  virtual void conv2d_forward(const ops::Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& bias,
                              const Tensor& y) = 0;
  virtual void conv2d_backward(const ops::Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy,
                               const Tensor& dx, const Tensor& dw, const Tensor& dbias) = 0;
  // argmax (int64, y's shape; may be undefined) gets the winner's flat index in its h*w plane.
  virtual void max_pool2d_forward(const ops::Pool2dGeometry& g, const Tensor& x, const Tensor& y,
                                  const Tensor& argmax) = 0;
  virtual void max_pool2d_backward(const ops::Pool2dGeometry& g, const Tensor& dy, const Tensor& argmax,
                                   const Tensor& dx) = 0;
  virtual void avg_pool2d_forward(const ops::Pool2dGeometry& g, const Tensor& x, const Tensor& y) = 0;
  virtual void avg_pool2d_backward(const ops::Pool2dGeometry& g, const Tensor& dy, const Tensor& dx) = 0;

  // The optimizers' updates in place over parameters on this device, as the host loops of
  // ops/cpu/optim_kernel.h with the same segments and coefficients (and the same formulas, so a
  // device step gives the host's bits where the arithmetic is IEEE on both); every segment is on
  // device `index`.
  virtual void sgd_update(int index, const std::vector<ops::cpu::OptimSegment>& segs, const ops::cpu::SgdCoeffs& c) = 0;
  virtual void adam_update(int index, const std::vector<ops::cpu::OptimSegment>& segs,
                           const ops::cpu::AdamCoeffs& c) = 0;

  // ---- generated kernels (codegen/) ----
  // Runs the elementwise fused kernel `name` over n elements on device `index`: its CUDA dialect
  // (codegen/render.h), whose text `source` renders (called only when neither this process nor
  // the disk cache holds the compiled kernel for `key` on this device's architecture). `args`
  // points to the entry point's by-value argument struct (nbytes of it: codegen::CudaArgs).
  virtual void launch_generated(const std::string& key, const std::function<std::string()>& source,
                                const std::string& name, const void* args, size_t nbytes, int64_t n, int index) = 0;

  // ---- collectives (see Collective) ----
  // Why this process cannot make a Collective ("" when it can): no library, no device.
  virtual std::string collective_unavailable() { return "this device type has no collective library"; }
  // What tells device `index` apart from every other device of this machine, whatever each
  // process's view of the devices (CUDA: its PCI bus id): a collective needs distinct devices.
  virtual std::string device_uid(int index) { return std::to_string(index); }
  // A new communicator's id, made by one process and sent to the others (bytes, opaque).
  virtual std::string collective_id() { throw NotImplementedError(collective_unavailable()); }
  // This process's member of the communicator `id` names: `size` processes, this one `rank`,
  // on device `index`. Every process calls it at once (it returns when all have).
  virtual std::unique_ptr<Collective> make_collective(const std::string& /*id*/, int /*size*/, int /*rank*/,
                                                      int /*index*/) {
    throw NotImplementedError(collective_unavailable());
  }
};

// Registers the backend of a device type (called once, when its extension loads).
void register_backend(DeviceType type, Backend* backend);
// The backend for `device`, with the device checked; RuntimeError when it is not loaded.
Backend& backend(Device device);
bool has_backend(DeviceType type);

}  // namespace nexus::device
