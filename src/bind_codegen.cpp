// Fusion pass and fused-kernel bindings (nexus._C.codegen). python/nexus/jit.py drives them.
#include <pybind11/stl.h>

#include "bindings.h"
#include "codegen/compile.h"
#include "codegen/lower.h"
#include "codegen/nvrtc.h"
#include "codegen/program.h"
#include "graph/passes/fuse.h"

namespace py = pybind11;

namespace nexus::python {

using codegen::Program;

static codegen::Dialect dialect(const std::string& d) {
  NX_CHECK(d == "cpp" || d == "cuda", "dialect must be 'cpp' or 'cuda', got '", d, "'");
  return d == "cpp" ? codegen::Dialect::Cpp : codegen::Dialect::Cuda;
}

void bind_codegen(py::module_& parent) {
  py::module_ m = parent.def_submodule("codegen", "fusion pass, fused-kernel programs, kernel cache");
  auto nogil = py::call_guard<py::gil_scoped_release>();

  py::class_<graph::FusionGroup>(m, "FusionGroup")
      .def_readonly("nodes", &graph::FusionGroup::nodes)
      .def_readonly("recomputed", &graph::FusionGroup::recomputed)
      .def_readonly("inputs", &graph::FusionGroup::inputs)
      .def_readonly("consts", &graph::FusionGroup::consts)
      .def_readonly("outputs", &graph::FusionGroup::outputs)
      .def_readonly("anchor", &graph::FusionGroup::anchor)
      .def_readonly("bytes_unfused", &graph::FusionGroup::bytes_unfused)
      .def_readonly("bytes_fused", &graph::FusionGroup::bytes_fused);
  py::class_<graph::FusionPlan>(m, "FusionPlan")
      .def_readonly("groups", &graph::FusionPlan::groups)
      .def_readonly("refusals", &graph::FusionPlan::refusals);
  m.def(
      "fuse", [](const graph::Graph& g, const std::vector<int>& roots) { return graph::partition(g, roots); },
      py::arg("graph"), py::arg("roots"));

  py::class_<Program, std::shared_ptr<Program>>(m, "Program")
      .def_property_readonly("name", &Program::name)
      .def_property_readonly("num_outputs", [](const Program& p) { return p.kernel().num_outputs(); })
      .def(
          "run", [](Program& p, const std::vector<Tensor>& in, const std::vector<double>& c) { return p.run(in, c); },
          nogil)
      .def(
          "source", [](const Program& p, const std::string& d) { return p.source(dialect(d)); },
          py::arg("dialect") = "cpp")
      .def("dump", [](const Program& p) { return p.kernel().dump(); })
      .def_property_readonly("runs_on_device", [](const Program& p) { return codegen::runs_on_device(p.kernel()); })
      .def("stats", [](const Program& p) {
        codegen::ProgramStats s = p.stats();
        return py::dict(py::arg("compiles") = s.compiles, py::arg("cache_hits") = s.cache_hits,
                        py::arg("compile_seconds") = s.compile_seconds, py::arg("interpreted") = s.interpreted);
      });
  py::class_<codegen::CompiledGroup>(m, "CompiledGroup")
      .def_readonly("group", &codegen::CompiledGroup::group)
      .def_readonly("program", &codegen::CompiledGroup::program)
      .def_readonly("consts", &codegen::CompiledGroup::consts);
  py::class_<codegen::CompiledPlan>(m, "CompiledPlan")
      .def_readonly("groups", &codegen::CompiledPlan::groups)
      .def_readonly("refusals", &codegen::CompiledPlan::refusals);
  m.def(
      "compile_plan",
      [](const graph::Graph& g, const std::vector<int>& roots) { return codegen::compile_plan(g, roots); },
      py::arg("graph"), py::arg("roots"), nogil);

  m.def("config", [] {
    const codegen::Compiler& c = codegen::host_compiler();
    return py::dict(py::arg("jit_enabled") = codegen::jit_enabled(), py::arg("compiler_found") = c.found,
                    py::arg("compiler") = c.describe(), py::arg("flags") = codegen::full_flags(c),
                    py::arg("cache_dir") = codegen::cache_dir());
  });
  m.def("cache_stats", [] {
    codegen::CacheStats s = codegen::cache_stats();
    return py::dict(py::arg("compiles") = s.compiles, py::arg("cache_hits") = s.hits, py::arg("rebuilt") = s.rebuilt,
                    py::arg("compile_seconds") = s.compile_seconds);
  });
  m.attr("cuda_args_bytes") = sizeof(codegen::CudaArgs);
  m.def("nvrtc_version", &codegen::nvrtc_version, nogil);
  m.def(
      "ptx",
      [](const Program& p, const std::string& arch, const std::vector<std::string>& libs) {
        return codegen::nvrtc_ptx(p.source(codegen::Dialect::Cuda), p.name(), arch, libs);
      },
      nogil);
}

}  // namespace nexus::python
