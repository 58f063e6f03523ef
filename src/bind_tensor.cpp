// The Tensor class: metadata, autograd state, views. Operators and user-facing argument handling
// live in python/nexus/tensor.py.
#include <pybind11/stl.h>

#include "bindings.h"
#include "ops/ops.h"
#include "tensor/tape.h"

namespace py = pybind11;

namespace nexus::python {

static py::tuple to_tuple(const std::vector<int64_t>& v) {
  py::tuple t(v.size());
  for (size_t i = 0; i < v.size(); ++i) t[i] = v[i];
  return t;
}

// nx.device, as torch.device: device("cuda:1"), device("cuda", 1); a string converts to it
// wherever a device is asked for. "cuda" means cuda:0.
static void bind_device(py::module_& m) {
  py::class_<Device>(m, "device")
      .def(py::init([](const std::string& text) { return parse_device(text); }), py::arg("type"))
      .def(py::init([](const std::string& type, int index) {
             NX_CHECK(type == "cuda" || (type == "cpu" && index == 0), "device(", type, ", ", index,
                      "): valid: ('cuda', N) with N >= 0, or ('cpu', 0)");
             return parse_device(type + ":" + std::to_string(index));
           }),
           py::arg("type"), py::arg("index"))
      .def_property_readonly("type", [](const Device& d) { return d.is_cpu() ? "cpu" : "cuda"; })
      .def_property_readonly("index",
                             [](const Device& d) { return d.is_cpu() ? py::none() : py::object(py::int_(d.index)); })
      .def("__str__", &Device::str)
      .def("__repr__",
           [](const Device& d) {
             return d.is_cpu() ? std::string("device(type='cpu')") : str("device(type='cuda', index=", d.index, ")");
           })
      .def("__eq__", [](const Device& a, const Device& b) { return a == b; })
      .def("__hash__", [](const Device& d) { return std::hash<std::string>()(d.str()); });
  py::implicitly_convertible<std::string, Device>();
}

py::class_<Tensor> bind_tensor(py::module_& m) {
  bind_device(m);
  py::enum_<DType>(m, "DType")
      .value("float32", DType::Float32)
      .value("float64", DType::Float64)
      .value("float16", DType::Float16)
      .value("bfloat16", DType::BFloat16)
      .value("int32", DType::Int32)
      .value("int64", DType::Int64)
      .value("bool", DType::Bool);

  py::class_<Tensor> cls(m, "Tensor", py::buffer_protocol(), py::dynamic_attr());
  cls.def_property_readonly("shape", [](const Tensor& t) { return to_tuple(t.shape()); })
      .def_property_readonly("strides", [](const Tensor& t) { return to_tuple(t.strides()); })
      .def_property_readonly("_dtype", &Tensor::dtype)
      .def_property_readonly("ndim", &Tensor::ndim)
      .def("numel", &Tensor::numel)
      .def_property_readonly("device", &Tensor::device)
      .def("is_contiguous", &Tensor::is_contiguous)
      // Promises that the tensor's memory never changes again (an inference model's weights), so
      // kernels may keep a packed form of it. Internal: nexus.onnx marks its constants.
      .def("_mark_constant",
           [](const Tensor& t) {
             if (t.defined() && t.storage()) t.storage()->mark_constant();
           })
      .def("data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw_data()); })
      .def_property("requires_grad", &Tensor::requires_grad, &Tensor::set_requires_grad)
      .def_property(
          "grad",
          [](const Tensor& t) -> std::optional<Tensor> {
            Tensor g = t.grad();
            return g.defined() ? std::optional<Tensor>(g) : std::nullopt;
          },
          [](Tensor& t, std::optional<Tensor> g) { t.set_grad(g ? *g : Tensor()); })
      .def_property_readonly("is_leaf", &Tensor::is_leaf)
      .def_property_readonly("grad_fn",
                             [](const Tensor& t) -> std::optional<std::string> {
                               return t.grad_fn() ? std::optional<std::string>(t.grad_fn()->name) : std::nullopt;
                             })
      .def("detach", &Tensor::detach)
      .def(
          "_backward", [](const Tensor& t, const Tensor& g) { autograd::backward(t, g); },
          py::call_guard<py::gil_scoped_release>());

  m.def("is_grad_enabled", &autograd::grad_enabled);
  m.def("set_grad_enabled", &autograd::set_grad_enabled);
  return cls;
}

}  // namespace nexus::python
