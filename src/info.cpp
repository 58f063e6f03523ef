#include <pybind11/stl.h>

#include "base/env.h"
#include "base/fs.h"
#include "base/thread_pool.h"
#include "bindings.h"
#include "nexus/config.h"
#include "ops/blas.h"

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
  m.def("get_num_threads", &num_threads);
  m.def("set_num_threads", &set_num_threads, py::arg("n"));
}

}  // namespace nexus::python
