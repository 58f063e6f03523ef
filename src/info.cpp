#include <pybind11/stl.h>

#include "base/cpu_variant.h"
#include "base/env.h"
#include "base/fs.h"
#include "base/thread_pool.h"
#include "bindings.h"
#include "nexus/config.h"
#include "ops/blas.h"
#include "tensor/allocator.h"

namespace py = pybind11;

namespace nexus::python {

void bind_info(py::module_& m) {
  m.def("build_info", [] {
    py::dict d;
    d["version"] = NEXUS_VERSION;
    d["build_type"] = NEXUS_BUILD_TYPE;
    d["blas"] = ops::blas_name();
    d["blas_core"] = ops::blas_core();  // OpenBLAS's kernels on this CPU
    d["march"] = NEXUS_ARCH;            // "portable", or the one -march of a NEXUS_ARCH build
    py::list variants;
    for (CpuVariant v : built_cpu_variants()) variants.append(cpu_variant_name(v));
    d["cpu_variants"] = variants;
    d["compiler"] = NEXUS_CXX_COMPILER;
    d["sanitizers"] = NEXUS_SANITIZE;
    d["cuda_compiled"] = bool(NEXUS_HAVE_CUDA);
    d["cuda_status"] = NEXUS_CUDA_STATUS;  // why it is (not) built: OFF, no backend, no toolkit
    d["mpi_compiled"] = bool(NEXUS_HAVE_MPI);
    return d;
  });
  m.def(
      "cpu_variant",
      [] {
        const CpuVariant v = active_cpu_variant();
        py::dict d;
        d["name"] = cpu_variant_name(v);
        d["march"] = cpu_variant_march(v);
        d["features"] = cpu_features();
        return d;
      },
      "The CPU variant the kernels run (NEXUS_CPU_VARIANT or the best this CPU supports): name, the\n"
      "-march it was compiled with, and the CPU features the choice saw.");
  m.def(
      "cpu_supports",
      [](const std::string& name) {
        for (CpuVariant v : built_cpu_variants())
          if (name == cpu_variant_name(v)) return cpu_supports(v);
        throw ValueError(str("no CPU variant \"", name, "\" in this build"));
      },
      py::arg("name"), "Whether this CPU can run the built variant `name`.");
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
  m.def(
      "cpu_round_trip_ns",
      [] {
        py::gil_scoped_release release;
        return cpu_round_trip_ns();
      },
      "The median round trip of a cache line between two threads, in ns (about 2 ms of ping-pong);\n"
      "0 when the process may use one CPU only. The benchmarks print it: it says what a parallel\n"
      "region's hand-offs cost on the machine at that moment.");
  m.def("get_num_threads", &num_threads,
        "The number of threads Nexus's kernels and BLAS use (the intra-op pool, the caller included).\n\n"
        "The default is NEXUS_NUM_THREADS, else the cores this process may use; MPI ranks started\n"
        "on one node without binding share its cores (4 ranks on 8 cores: 2 each).\n\n"
        "Example: ``nx.get_num_threads()  # 8``");
  m.def("set_num_threads", &set_num_threads, py::arg("n"),
        "Sets the number of threads for kernels and BLAS, from the next operation on.\n\n"
        "Parameters: n -- an integer in [1, 1024].\n"
        "Raises: ValueError naming n when it is outside [1, 1024].\n\n"
        "Example: ``nx.set_num_threads(2)``");
}

}  // namespace nexus::python
