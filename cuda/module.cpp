// PYBIND11_MODULE(_C_cuda): importing it registers the CUDA backend with the core (one
// libnexus_core per process, shared with nexus._C), so tensors on "cuda" devices work from then
// on. Also: device queries, memory statistics, and the host-side helpers (size classes, launch
// geometry) that tests check without a GPU. Bindings only.
#include <cuda_runtime_api.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <sstream>

#include "archs.h"
#include "backend.h"
#include "cublas.h"
#include "base/error.h"
#include "device_guard.h"
#include "geometry.h"

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
      "empty_cache", [] { cuda_backend().allocator().empty_cache(); }, nogil,
      "Returns every cached (freed) block to the driver.");
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
  m.def("size_class", &size_class, py::arg("nbytes"), "Bytes the caching allocator reserves for a request.");
  m.def("reduce_parts", &reduce_parts, py::arg("n_out"), py::arg("n_red"),
        "Chunks each output of a reduction is split into (1: one block per output).");
  m.def(
      "launch_geometry",
      [](int64_t n) {
        const LaunchGeometry g = launch_geometry(n);
        return py::make_tuple(g.blocks, g.threads);
      },
      py::arg("n"), "(blocks, threads) of a grid-stride kernel over n elements.");
}
