// PYBIND11_MODULE(_C_cuda): importing it registers the CUDA backend with the core (one
// libnexus_core per process, shared with nexus._C), so tensors on "cuda" devices work from then
// on. Also: device queries, memory statistics, streams and events (a stream is passed to Python
// as its handle, an int; 0 is the legacy default stream), pinned host tensors, and the host-side
// helpers (size classes, launch geometry) that tests check without a GPU. Bindings only.
#include <cuda_runtime_api.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <sstream>

#include "archs.h"
#include "backend.h"
#include "cublas.h"
#include "base/error.h"
#include "device_guard.h"
#include "geometry.h"
#include "nccl.h"
#include "operands.h"
#include "ops/ops.h"

namespace py = pybind11;
using namespace nexus;
using namespace nexus::cuda;

namespace {

cudaDeviceProp properties(int index) {
  cuda_backend().check_device(index);
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
  return prop;
}

cudaStream_t as_stream(uintptr_t handle) { return reinterpret_cast<cudaStream_t>(handle); }
uintptr_t as_handle(cudaStream_t stream) { return reinterpret_cast<uintptr_t>(stream); }

// A CUDA event of one device (torch.cuda.Event): recorded on a stream, waited on by the host or
// by another stream. Timing is off unless asked for (it costs a little at every record).
class Event {
 public:
  Event(int device, bool timing) : device_(device) {
    cuda_backend().check_device(device);
    DeviceGuard guard(device);
    check(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming),
          "cudaEventCreateWithFlags");
  }
  ~Event() { (void)cudaEventDestroy(event_); }  // the driver keeps it until recorded work is done
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(uintptr_t stream) {
    DeviceGuard guard(device_);
    check(cudaEventRecord(event_, as_stream(stream)), "cudaEventRecord");
    recorded_ = true;
  }
  void wait(uintptr_t stream) {  // work queued on `stream` from now on waits for the recorded work
    DeviceGuard guard(device_);
    check(cudaStreamWaitEvent(as_stream(stream), event_, 0), "cudaStreamWaitEvent");
  }
  bool query() { return event_done(event_); }
  void synchronize() { check(cudaEventSynchronize(event_), "cudaEventSynchronize"); }
  double elapsed_ms(const Event& end) {
    NX_CHECK(recorded_ && end.recorded_, "Event.elapsed_time: both events must be recorded first");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, event_, end.event_), "cudaEventElapsedTime");
    return ms;
  }
  int device() const { return device_; }

 private:
  int device_;
  cudaEvent_t event_ = nullptr;
  bool recorded_ = false;
};

// A copy of host tensor x in pinned memory (contiguous, x's shape and dtype, no autograd history).
Tensor pin_memory(const Tensor& x) {
  NX_CHECK(x.device().is_cpu(), "pin_memory: the tensor is on ", x.device().str(),
           "; only host tensors can be pinned (pinned memory is host memory)");
  const Tensor src = ops::contiguous(x.detach());
  Tensor out = cuda_backend().empty_pinned(x.shape(), x.dtype());
  if (const size_t bytes = size_t(x.numel()) * itemsize(x.dtype())) std::memcpy(out.raw_data(), src.raw_data(), bytes);
  return out;
}

bool is_pinned(const Tensor& x) {
  if (!x.device().is_cpu() || !x.storage()) return false;
  const Storage& s = *x.storage();
  return cuda_backend().pinned().contains(s.data(), std::max<size_t>(s.nbytes(), 1));
}

}  // namespace

PYBIND11_MODULE(_C_cuda, m) {
  m.doc() = "Nexus CUDA backend: registers the device kernels with the core; device and memory queries";
  // Errors reach Python through nexus._C's translator (pybind11 shares it between the modules;
  // nexus imports _C first).
  device::register_backend(DeviceType::CUDA, &cuda_backend());
  auto nogil = py::call_guard<py::gil_scoped_release>();

  m.def(
      "device_count", [] { return cuda_backend().device_count(); },
      "Number of visible CUDA devices (0 without a driver).");
  m.def(
      "is_available",
      [] {
        CudaBackend& be = cuda_backend();
        return py::make_tuple(be.device_count() > 0, be.unavailable_reason());
      },
      "(True, '') when a CUDA device can be used, else (False, why not).");
  m.def(
      "synchronize", [](int index) { cuda_backend().synchronize(index); }, py::arg("index") = 0, nogil,
      "Waits until all work queued on device `index` has finished.");
  m.def(
      "memory_stats",
      [](int index) {
        const AllocatorStats s = cuda_backend().allocator().stats(index);
        py::dict d;
        d["allocated_bytes"] = s.allocated_bytes;
        d["cached_bytes"] = s.cached_bytes;
        d["peak_allocated_bytes"] = s.peak_allocated_bytes;
        d["hits"] = s.hits;
        d["misses"] = s.misses;
        return d;
      },
      py::arg("index") = 0, "The caching allocator's counters for device `index`.");
  m.def(
      "empty_cache",
      [] {
        cuda_backend().allocator().empty_cache();
        cuda_backend().pinned().empty_cache();
      },
      nogil, "Returns every cached (freed) block, device and pinned host memory, to the driver.");
  m.def(
      "runtime_version",
      [] {
        int v = 0;
        (void)cudaRuntimeGetVersion(&v);
        return version_string(v);
      },
      "The CUDA runtime this build links, e.g. '13.0'.");
  m.def(
      "driver_version",
      [] {
        int v = 0;
        if (cuda_backend().unavailable_reason().rfind("no NVIDIA driver", 0) == 0) return std::string("none");
        if (cudaDriverGetVersion(&v) != cudaSuccess) return std::string("none");
        return version_string(v);
      },
      "The newest CUDA version the driver supports, or 'none' without a driver.");
  m.def(
      "device_name", [](int index) { return std::string(properties(index).name); }, py::arg("index") = 0,
      "The device's product name.");
  m.def(
      "compute_capability",
      [](int index) {
        const cudaDeviceProp p = properties(index);
        return py::make_tuple(p.major, p.minor);
      },
      py::arg("index") = 0, "(major, minor) of device `index`.");
  m.def("nccl_version", &nccl_version, "NCCL's version, e.g. '2.27.3', or 'none' where it cannot be loaded.");
  m.def("nccl_unavailable", &nccl_unavailable, "Why NCCL cannot be used here ('' when it can).");
  m.def("nccl_unique_id", [] { return py::bytes(nccl_unique_id()); }, "A new NCCL communicator's id (128 bytes).");
  // One process's member of an NCCL communicator, as DataParallel makes it (tests reach it here).
  py::class_<device::Collective>(m, "Collective")
      .def(py::init([](const py::bytes& id, int size, int rank, int index) {
             return make_nccl_collective(std::string(id), size, rank, index);
           }),
           py::arg("id"), py::arg("size"), py::arg("rank"), py::arg("device"), nogil)
      .def("weighted_sum", &device::Collective::weighted_sum, py::arg("grads"), py::arg("weight"), nogil);
  m.def("allow_tf32", &allow_tf32, "Whether float32 matmuls may use TF32 tensor cores.");
  m.def("set_allow_tf32", &set_allow_tf32, py::arg("on"), "Lets float32 matmuls use TF32 tensor cores (or not).");
  m.def(
      "build_archs",
      [] {
        std::vector<std::string> out;
        for (const BuildArch& a : build_archs()) out.push_back("sm_" + std::to_string(a.cc));
        return out;
      },
      "The sm_XX architectures this build carries code for.");
  m.def(
      "runs_on",
      [](const std::string& archs, int major, int minor) { return runs_on(parse_archs(archs), 10 * major + minor); },
      py::arg("archs"), py::arg("major"), py::arg("minor"),
      "Whether a build for `archs` (CMake's list, comma-separated) runs on a device of that capability.");
  m.def(
      "generated_stats",
      [] {
        const GeneratedStats s = generated_stats();
        return py::dict(py::arg("compiles") = s.compiles, py::arg("disk_hits") = s.disk_hits,
                        py::arg("launches") = s.launches);
      },
      "Fused kernels run on CUDA devices by this process: NVRTC compiles, disk-cache reads, launches.");
  m.def(
      "current_stream", [](int index) { return as_handle(current_stream(index)); }, py::arg("index"),
      "This thread's current stream on device `index` (0: the legacy default stream).");
  m.def(
      "set_current_stream", [](int index, uintptr_t s) { set_current_stream(index, as_stream(s)); }, py::arg("index"),
      py::arg("stream"), "Makes `stream` this thread's current stream on device `index`.");
  m.def(
      "new_stream",
      [](int index) {
        cuda_backend().check_device(index);
        return as_handle(pool_stream(index));
      },
      py::arg("index"), "A non-blocking stream of device `index` from the process's pool.");
  m.def(
      "stream_synchronize",
      [](int index, uintptr_t s) {
        DeviceGuard guard(index);
        check(cudaStreamSynchronize(as_stream(s)), "cudaStreamSynchronize");
      },
      py::arg("index"), py::arg("stream"), nogil, "Waits until the work queued on `stream` has finished.");
  m.def(
      "stream_query",
      [](int index, uintptr_t s) {
        DeviceGuard guard(index);
        const cudaError_t err = cudaStreamQuery(as_stream(s));
        if (err == cudaErrorNotReady) {
          (void)cudaGetLastError();
          return false;
        }
        check(err, "cudaStreamQuery");
        return true;
      },
      py::arg("index"), py::arg("stream"), "Whether the work queued on `stream` has finished.");
  py::class_<Event>(m, "Event")
      .def(py::init<int, bool>(), py::arg("device"), py::arg("enable_timing") = false)
      .def("record", &Event::record, py::arg("stream"))
      .def("wait", &Event::wait, py::arg("stream"))
      .def("query", &Event::query)
      .def("synchronize", &Event::synchronize, nogil)
      .def("elapsed_ms", &Event::elapsed_ms, py::arg("end"))
      .def_property_readonly("device", &Event::device);
  m.def("pin_memory", &pin_memory, py::arg("x"), nogil, "A copy of host tensor x in pinned (page-locked) memory.");
  m.def("is_pinned", &is_pinned, py::arg("x"), "Whether x's memory is pinned host memory from pin_memory().");
  m.def(
      "record_stream",
      [](const Tensor& x, uintptr_t s) {
        NX_CHECK(x.device().type == DeviceType::CUDA, "record_stream: the tensor is on ", x.device().str(),
                 ", not a CUDA device");
        cuda_backend().allocator().record_stream(x.storage()->data(), as_stream(s));
      },
      py::arg("x"), py::arg("stream"),
      "Marks x's memory as used by work on `stream`: after x is freed it is not reused before that work is done.");
  m.def("size_class", &size_class, py::arg("nbytes"), "Bytes the caching allocator reserves for a request.");
  m.def("reduce_parts", &reduce_parts, py::arg("n_out"), py::arg("n_red"),
        "Chunks each output of a reduction is split into (1: one block per output).");
  m.def(
      "operand_layout",
      [](const Tensor& out, const Tensor& a, const Tensor& b) {
        const Operands<3> g = make_operands<3>(out.shape(), {&out, &a, &b}, "operand_layout");
        return py::make_tuple(g.ndim, g.contiguous, g.flat);
      },
      py::arg("out"), py::arg("a"), py::arg("b"),
      "(merged dims, contiguous, flat) of a binary kernel's operands (a and b broadcast to out's shape).");
  m.def(
      "launch_geometry",
      [](int64_t n) {
        const LaunchGeometry g = launch_geometry(n);
        return py::make_tuple(g.blocks, g.threads);
      },
      py::arg("n"), "(blocks, threads) of a grid-stride kernel over n elements.");
}
