// Op bindings: one line each, GIL released. Python-side argument normalisation (scalars, axis
// tuples, dtype names) happens in python/nexus/functional.py.
#include <pybind11/stl.h>

#include "bindings.h"
#include "ops/ops.h"

namespace py = pybind11;

namespace nexus::python {

using ops::Axes;
using OptTensor = std::optional<Tensor>;
static Tensor opt(const OptTensor& t) { return t ? *t : Tensor(); }

// One value per row of the op table (ops/op_table.h), named as op_name, with the row's columns.
template <class Op, size_t N>
static void bind_op_enum(py::module_& m, const char* name, const ops::OpInfo (&table)[N]) {
  py::enum_<Op> e(m, name);
  for (size_t i = 0; i < N; ++i) e.value(table[i].name.data(), Op(i));
  e.def_property_readonly("domain", [](Op op) { return ops::op_info(op).domain; })
      .def_property_readonly("is_comparison", [](Op op) { return ops::op_info(op).result == ops::OpResult::Bool; })
      .def_property_readonly("is_backward_only", [](Op op) { return ops::is_backward_only(op); });
}

void bind_ops(py::module_& m) {
  py::enum_<ops::OpDomain>(m, "OpDomain")
      .value("any", ops::OpDomain::Any)
      .value("numeric", ops::OpDomain::Numeric)
      .value("float", ops::OpDomain::Float);
  bind_op_enum<ops::UnaryOp>(m, "UnaryOp", ops::kUnaryOps);
  bind_op_enum<ops::BinaryOp>(m, "BinaryOp", ops::kBinaryOps);

  auto nogil = py::call_guard<py::gil_scoped_release>();
  // creation
  m.def("full", &ops::full, py::arg("shape"), py::arg("value"), py::arg("dtype"), py::arg("device") = Device::cpu(),
        nogil);
  m.def("arange", &ops::arange, nogil);
  m.def("rand", &ops::rand, nogil);
  m.def("randn", &ops::randn, nogil);
  m.def("manual_seed", &ops::manual_seed);
  m.def("astype", &ops::astype, nogil);
  m.def("to_device", &ops::to_device, py::arg("x"), py::arg("device"), py::arg("non_blocking") = false, nogil);
  m.def("contiguous", [](const Tensor& x) { return ops::contiguous(x); }, nogil);
  m.def("clone", [](const Tensor& x) { return ops::contiguous(x, /*force_copy=*/true); }, nogil);
  m.def("copy_", &ops::copy_, nogil);
  // views
  m.def("reshape", &ops::reshape, nogil);
  m.def("permute", &ops::permute, nogil);
  m.def("transpose", &ops::transpose, nogil);
  m.def("expand", &ops::expand, nogil);
  m.def("slice", &ops::slice, nogil);
  m.def("select", &ops::select, nogil);
  m.def("unsqueeze", &ops::unsqueeze, nogil);
  m.def("index_select", &ops::index_select, nogil);
  m.def("index_copy_", &ops::index_copy_, nogil);
  m.def("concat", &ops::concat, nogil);
  m.def("stack", &ops::stack, nogil);
  // elementwise
  m.def("unary", &ops::unary, nogil);
  m.def("binary", &ops::binary, nogil);
  m.def("where", &ops::where, nogil);
  // reductions
  m.def("sum", &ops::sum, nogil);
  m.def("mean", &ops::mean, nogil);
  m.def("amax", &ops::amax, nogil);
  m.def("amin", &ops::amin, nogil);
  m.def("argmax", &ops::argmax, nogil);
  m.def("var", &ops::var, nogil);
  m.def("logsumexp", &ops::logsumexp, nogil);
  m.def("softmax", &ops::softmax, nogil);
  m.def("log_softmax", &ops::log_softmax, nogil);
  // nn
  m.def("matmul", &ops::matmul, nogil);
  m.def("cross_entropy", &ops::cross_entropy, nogil);
  // The ops each front end takes, for the checks in python/nexus (functional, distributed).
  m.attr("LOSS_REDUCTIONS") =
      py::tuple(py::cast(std::vector(std::begin(ops::kLossReductions), std::end(ops::kLossReductions))));
  m.attr("REDUCTIONS") = py::tuple(py::cast(std::vector(std::begin(kReductions), std::end(kReductions))));
  m.def(
      "conv2d",
      [](const Tensor& x, const Tensor& w, const OptTensor& b, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
         int64_t groups) { return ops::conv2d(x, w, opt(b), sh, sw, ph, pw, groups); },
      py::arg("x"), py::arg("w"), py::arg("b"), py::arg("sh"), py::arg("sw"), py::arg("ph"), py::arg("pw"),
      py::arg("groups") = 1, nogil);
  m.def("max_pool2d", &ops::max_pool2d, nogil);
  m.def("avg_pool2d", &ops::avg_pool2d, nogil);
  m.def("dropout", &ops::dropout, nogil);
  m.def(
      "layer_norm",
      [](const Tensor& x, const Shape& s, const OptTensor& w, const OptTensor& b, double eps) {
        return ops::layer_norm(x, s, opt(w), opt(b), eps);
      },
      nogil);
  m.def(
      "batch_norm",
      [](const Tensor& x, const OptTensor& rm, const OptTensor& rv, const OptTensor& w, const OptTensor& b,
         bool training, double momentum,
         double eps) { return ops::batch_norm(x, opt(rm), opt(rv), opt(w), opt(b), training, momentum, eps); },
      nogil);
}

}  // namespace nexus::python
