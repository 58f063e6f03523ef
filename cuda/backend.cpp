// CudaBackend (backend.h): device discovery and its error messages, memory through the caching
// allocator, copies, and the kernels' host side (operand descriptions, then one launcher each).
#include "backend.h"

#include <dlfcn.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>

#include "archs.h"
#include "device_guard.h"
#include "kernels/kernels.h"
#include "operands.h"
#include "tensor/half.h"

namespace nexus::cuda {
namespace {

struct Probe {
  int count = 0;
  std::string reason;
};

// Asks the runtime once how many devices there are; the reason names what is missing otherwise.
Probe probe() {
  Probe p;
  int runtime = 0, driver = 0;
  (void)cudaRuntimeGetVersion(&runtime);
  // The runtime reports a missing driver as "insufficient driver"; look for the library first
  // so that the message says what is really missing.
  void* libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!libcuda) {
    const char* err = dlerror();
    p.reason = str("no NVIDIA driver found (libcuda.so.1 could not be loaded: ", err ? err : "not found",
                   "); install the NVIDIA driver, or use device='cpu'");
    return p;
  }
  (void)cudaDriverGetVersion(&driver);
  const cudaError_t err = cudaGetDeviceCount(&p.count);
  if (err == cudaSuccess && p.count > 0) return p;
  p.count = 0;
  (void)cudaGetLastError();
  if (err == cudaErrorInsufficientDriver || (driver > 0 && driver < runtime))
    p.reason = str("the driver is too old for CUDA runtime ", version_string(runtime), " (the driver supports CUDA ",
                   version_string(driver), "); update the NVIDIA driver");
  else if (err == cudaErrorNoDevice || err == cudaSuccess)
    p.reason = "no CUDA device: the NVIDIA driver is installed but sees no GPU (check CUDA_VISIBLE_DEVICES)";
  else p.reason = str("CUDA cannot be initialised: ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
  return p;
}

const Probe& probed() {
  static const Probe p = probe();
  return p;
}

// The value a fill stores, as the CPU's from_double converts it, in the dtype's bytes.
uint64_t fill_bits(DType t, double v) {
  auto saturate = [&](double lo, double hi) -> int64_t {
    if (std::isnan(v)) return 0;
    if (v >= hi) return t == DType::Int32 ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int64_t>::max();
    if (v <= lo) return t == DType::Int32 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min();
    return int64_t(v);
  };
  uint64_t bits = 0;
  switch (t) {
    case DType::Float32: {
      const float f = float(v);
      std::memcpy(&bits, &f, 4);
      return bits;
    }
    case DType::Float64: std::memcpy(&bits, &v, 8); return bits;
    case DType::Float16: return float_to_fp16(float(v));
    case DType::BFloat16: return float_to_bf16(float(v));
    case DType::Int32: return uint32_t(int32_t(saturate(-2147483648.0, 2147483647.0)));
    case DType::Int64: return uint64_t(saturate(-9223372036854775808.0, 9223372036854775807.0));
    case DType::Bool: return v != 0 ? 1 : 0;
  }
  return 0;
}

// Dimensions of x (sizes above 1), merged where contiguous, innermost first, into shape/stride.
int merge_dims(const Tensor& x, const std::vector<int64_t>& dims, int64_t* shape, int64_t* stride, const char* what) {
  std::vector<int64_t> sh, st;
  for (int64_t d : dims) {
    const int64_t size = x.shape()[size_t(d)], s = x.strides()[size_t(d)];
    if (size == 1) continue;
    if (!sh.empty() && st.back() == s * size) {
      sh.back() *= size;
      st.back() = s;
    } else {
      sh.push_back(size);
      st.push_back(s);
    }
  }
  NX_CHECK(sh.size() <= size_t(kMaxDims), "reduce on CUDA: the ", what, " dimensions of shape ", shape_str(x.shape()),
           " do not merge into ", kMaxDims, " or fewer; make x contiguous first");
  const int nd = int(sh.size());
  for (int d = 0; d < nd; ++d) {
    shape[d] = sh[size_t(nd - 1 - d)];
    stride[d] = st[size_t(nd - 1 - d)];
  }
  return nd;
}

}  // namespace

std::string version_string(int version) {
  if (version <= 0) return "none";
  return str(version / 1000, ".", (version % 1000) / 10);
}

CudaBackend& cuda_backend() {
  // Never destroyed: tensors freed during interpreter shutdown still release into it.
  static CudaBackend* instance = new CudaBackend;
  return *instance;
}

const std::string& CudaBackend::unavailable_reason() { return probed().reason; }

int CudaBackend::device_count() { return probed().count; }

void CudaBackend::check_device(int index) {
  const Probe& p = probed();
  if (p.count == 0) throw DeviceError(str("cannot use cuda:", index, ": ", p.reason));
  if (index < 0 || index >= p.count)
    throw DeviceError(str("cuda:", index, " requested but only ", p.count, p.count == 1 ? " device" : " devices",
                          " (cuda:0", p.count > 1 ? str(" to cuda:", p.count - 1) : std::string(), ") visible"));
  if (index < int(kMaxChecked) && checked_[size_t(index)].load(std::memory_order_acquire)) return;
  int major = 0, minor = 0;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index), "cudaDeviceGetAttribute");
  if (!runs_on(build_archs(), 10 * major + minor))
    throw DeviceError(str("cuda:", index, " has compute capability ", major, ".", minor, ", but this build of nexus ",
                          "carries code for ", describe(build_archs()), " only",
                          major < 7 || (major == 7 && minor < 5)
                              ? " (CUDA 13 toolkits no longer target it): rebuild with a CUDA 12 toolkit and "
                                "NEXUS_CUDA_ARCHS including it, as the README's Build options say for V100 (sm_70)"
                              : ": rebuild with -Ccmake.define.NEXUS_CUDA_ARCHS including it"));
  if (index < int(kMaxChecked)) checked_[size_t(index)].store(true, std::memory_order_release);
}

void* CudaBackend::allocate(size_t nbytes, int index) {
  return allocator_.allocate(nbytes, index, current_stream(index));
}

void CudaBackend::release(void* ptr, int /*index*/) { allocator_.release(ptr); }

void CudaBackend::copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
                             bool non_blocking) {
  if (nbytes == 0) return;
  const bool to_host = dst_device.is_cpu(), from_host = src_device.is_cpu();
  NX_ASSERT(!(to_host && from_host), "host-to-host copy reached the CUDA backend");
  DeviceGuard guard(from_host ? dst_device.index : src_device.index);
  const cudaStream_t stream = current_stream();
  if (!to_host && !from_host && dst_device.index != src_device.index) {
    check(cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, nbytes, stream), "cudaMemcpyPeerAsync");
    return;
  }
  const cudaMemcpyKind kind = from_host ? cudaMemcpyHostToDevice
                              : to_host ? cudaMemcpyDeviceToHost
                                        : cudaMemcpyDeviceToDevice;
  check(cudaMemcpyAsync(dst, src, nbytes, kind, stream), "cudaMemcpyAsync");
  if (from_host && non_blocking && pinned_.contains(src, nbytes)) {
    pinned_.record_use(src, dst_device.index, stream);  // its block is not reused before the copy is done
    return;
  }
  // The host reads its bytes after we return (device-to-host), or may free or reuse its source
  // buffer (host-to-device: pageable memory is staged, but only part of it before the call returns).
  if (to_host || from_host) check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

Tensor CudaBackend::empty_pinned(const Shape& shape, DType dtype) {
  check_device(0);  // page-locking goes through the driver
  const size_t bytes = size_t(numel(shape)) * itemsize(dtype);
  void* p = pinned_.allocate(bytes);
  auto storage = std::make_shared<Storage>(p, bytes, [](void* q) { cuda_backend().pinned().release(q); });
  return Tensor::view_of(std::move(storage), 0, shape, contiguous_strides(shape), dtype);
}

namespace {

// The event recorded on the copy stream after a device-to-host copy, and the destination, which
// the copy may still be writing: dropped unfinished (an error unwinding the step), it waits.
class EventCopy final : public device::PendingCopy {
 public:
  EventCopy(cudaEvent_t e, std::shared_ptr<Storage> dst) : event_(e), dst_(std::move(dst)) {}
  ~EventCopy() override {
    (void)cudaEventSynchronize(event_);
    (void)cudaEventDestroy(event_);
  }
  EventCopy(const EventCopy&) = delete;
  EventCopy& operator=(const EventCopy&) = delete;
  bool done() override { return event_done(event_); }
  void wait() override { check(cudaEventSynchronize(event_), "cudaEventSynchronize"); }

 private:
  cudaEvent_t event_;
  std::shared_ptr<Storage> dst_;
};

}  // namespace

std::unique_ptr<device::PendingCopy> CudaBackend::copy_to_host_async(const Tensor& dst, const Tensor& src) {
  const size_t bytes = size_t(src.numel()) * itemsize(src.dtype());
  NX_ASSERT(dst.device().is_cpu() && src.device().type == DeviceType::CUDA && dst.is_contiguous() &&
                src.is_contiguous() && size_t(dst.numel()) * itemsize(dst.dtype()) == bytes,
            "copy_to_host_async of mismatched tensors");
  const int index = src.device().index;
  DeviceGuard guard(index);
  static std::array<std::atomic<cudaStream_t>, kMaxStreamDevices> copy_streams{};  // one per device
  cudaStream_t copy = copy_streams[size_t(index)].load();
  if (!copy) {
    cudaStream_t fresh = pool_stream(index);
    copy = copy_streams[size_t(index)].compare_exchange_strong(copy, fresh) ? fresh : copy;
  }
  const cudaEvent_t ready = recorded_event(current_stream());  // src is final once this is reached
  const cudaError_t waited = cudaStreamWaitEvent(copy, ready, 0);
  (void)cudaEventDestroy(ready);  // released once the wait has been satisfied
  check(waited, "cudaStreamWaitEvent");
  if (bytes)
    check(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), bytes, cudaMemcpyDeviceToHost, copy), "cudaMemcpyAsync");
  allocator_.record_stream(src.storage()->data(), copy);  // src's block waits for the copy after its release
  return std::make_unique<EventCopy>(recorded_event(copy), dst.storage());
}

void CudaBackend::synchronize(int index) {
  check_device(index);
  DeviceGuard guard(index);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

void CudaBackend::cast(const Tensor& dst, const Tensor& src) {
  DeviceGuard guard(dst.device().index);
  launch_cast(dst.dtype(), src.dtype(), make_operands<2>(dst.shape(), {&dst, &src}, "cast"), dst.numel(),
              current_stream());
}

void CudaBackend::fill(const Tensor& out, double value) {
  NX_ASSERT(out.is_contiguous(), "CUDA fill of a strided tensor");
  DeviceGuard guard(out.device().index);
  launch_fill(out.raw_data(), int(itemsize(out.dtype())), fill_bits(out.dtype(), value), out.numel(), current_stream());
}

void CudaBackend::unary(ops::UnaryOp op, const Tensor& out, const Tensor& x) {
  DeviceGuard guard(out.device().index);
  const char* name = ops::op_name(op).data();
  launch_unary(op, x.dtype(), make_operands<2>(out.shape(), {&out, &x}, name), out.numel(), current_stream());
}

void CudaBackend::binary(ops::BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  DeviceGuard guard(out.device().index);
  const char* name = ops::op_name(op).data();
  launch_binary(op, a.dtype(), make_operands<3>(out.shape(), {&out, &a, &b}, name), out.numel(), current_stream());
}

void CudaBackend::where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  DeviceGuard guard(out.device().index);
  launch_where(a.dtype(), make_operands<4>(out.shape(), {&out, &cond, &a, &b}, "where"), out.numel(), current_stream());
}

void CudaBackend::reduce(ReduceOp op, const Tensor& out, const Tensor& x, const std::vector<int64_t>& axes) {
  NX_ASSERT(op == ReduceOp::Sum || op == ReduceOp::Max || op == ReduceOp::Min, "CUDA reduce of ", reduce_op_name(op));
  DeviceGuard guard(out.device().index);
  std::vector<bool> reduced(size_t(x.ndim()), false);
  for (int64_t a : axes) reduced[size_t(a)] = true;
  std::vector<int64_t> kept_dims, red_dims;
  for (int64_t d = 0; d < x.ndim(); ++d) (reduced[size_t(d)] ? red_dims : kept_dims).push_back(d);
  ReduceGeometry g{};
  g.x = x.raw_data();
  g.out = out.raw_data();
  g.n_out = out.numel();
  g.n_red = 1;
  for (int64_t d : red_dims) g.n_red *= x.shape()[size_t(d)];
  g.kept_ndim = merge_dims(x, kept_dims, g.kept_shape, g.kept_stride, "kept");
  g.red_ndim = merge_dims(x, red_dims, g.red_shape, g.red_stride, "reduced");
  g.parts = reduce_parts(g.n_out, g.n_red);
  Tensor partials;  // freed into the cache after the launch: the stream orders its reuse after it
  if (g.parts > 1) {
    g.chunk = (g.n_red + g.parts - 1) / g.parts;
    g.parts = (g.n_red + g.chunk - 1) / g.chunk;  // no empty chunk
    partials = Tensor::empty({g.n_out * g.parts}, DType::Int64, out.device());
    g.partials = partials.raw_data();
  }
  launch_reduce(op, x.dtype(), out.dtype(), g, current_stream());
}

void CudaBackend::argmax(const Tensor& out, const Tensor& x, int64_t rows, int64_t n) {
  NX_ASSERT(x.is_contiguous() && out.dtype() == DType::Int64, "CUDA argmax of a strided x or into non-int64");
  DeviceGuard guard(out.device().index);
  launch_argmax(x.dtype(), static_cast<int64_t*>(out.raw_data()), x.raw_data(), rows, n, current_stream());
}

void CudaBackend::sgd_update(int index, const std::vector<ops::cpu::OptimSegment>& segs, const ops::cpu::SgdCoeffs& c) {
  DeviceGuard guard(index);
  for (const ops::cpu::OptimSegment& s : segs) launch_sgd(s, c, current_stream());
}

void CudaBackend::adam_update(int index, const std::vector<ops::cpu::OptimSegment>& segs,
                              const ops::cpu::AdamCoeffs& c) {
  DeviceGuard guard(index);
  for (const ops::cpu::OptimSegment& s : segs) launch_adam(s, c, current_stream());
}

}  // namespace nexus::cuda
