#include <pybind11/stl.h>

#include "base/env.h"
#include "base/fs.h"
#include "base/thread_pool.h"
#include "bindings.h"
#include "nexus/config.h"
#include "ops/blas.h"
#include "tensor/allocator.h"

namespace py = pybind11;

namespace nexus::python {

static const char* simd_level() {
#if defined(__AVX512F__)
  return "AVX-512";
#elif defined(__AVX2__) && defined(__FMA__)
  return "AVX2+FMA";
#elif defined(__AVX__)
  return "AVX";
#elif defined(__SSE4_2__)
  return "SSE4.2";
#elif defined(__ARM_NEON)
  return "NEON";
#else
  return "scalar";
#endif
}

void bind_info(py::module_& m) {
  m.def("build_info", [] {
    py::dict d;
    d["version"] = NEXUS_VERSION;
    d["build_type"] = NEXUS_BUILD_TYPE;
    d["blas"] = ops::blas_name();
    d["simd"] = simd_level();
    d["march"] = NEXUS_ARCH;
    d["compiler"] = NEXUS_CXX_COMPILER;
    d["sanitizers"] = NEXUS_SANITIZE;
    d["cuda_compiled"] = bool(NEXUS_HAVE_CUDA);
    d["cuda_status"] = NEXUS_CUDA_STATUS;  // why it is (not) built: OFF, no backend, no toolkit
    d["mpi_compiled"] = bool(NEXUS_HAVE_MPI);
    return d;
  });
  m.def("knobs", [] {
    py::list out;
    for (const Knob& k : knobs()) out.append(py::make_tuple(k.name, k.default_value, k.description));
    return out;
  });
  m.def("knob_value", &knob_value, py::arg("name"));
  m.def(
      "write_atomic",
      [](const std::string& path, const py::bytes& data, unsigned mode, bool durable) {
        auto bytes = std::string_view(data);  // no copy; `data` outlives the call
        py::gil_scoped_release release;
        fs::write_atomic(path, bytes, mode, durable);
      },
      py::arg("path"), py::arg("data"), py::arg("mode") = 0666, py::arg("durable") = true);
  m.def(
      "alloc_stats",
      [] {
        alloc::Stats s = alloc::stats();
        py::dict d;
        d["hits"] = s.hits;
        d["misses"] = s.misses;
        d["cached_bytes"] = s.cached_bytes;
        d["cached_blocks"] = s.cached_blocks;
        d["limit_bytes"] = s.limit_bytes;
        return d;
      },
      "The host allocator's block cache (blocks of 32 KiB and more): hits, misses, cached_bytes,\n"
      "cached_blocks, limit_bytes (NEXUS_ALLOC_CACHE_MB). Counters run from process start.");
  m.def("alloc_empty_cache", &alloc::empty_cache,
        "Returns every cached block to the system; the hit and miss counters keep counting.");
  m.def("get_num_threads", &num_threads);
  m.def("set_num_threads", &set_num_threads, py::arg("n"));
}

}  // namespace nexus::python
