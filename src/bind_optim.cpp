// Optimizer bindings (nexus._C.optim): Config, State, step, global_grad_norm, clip_grad_norm.
// Schedules and the user-facing classes live in python/nexus/optim.py. An undefined Tensor (no
// gradient, no buffer yet) crosses as None.
#include <pybind11/stl.h>

#include <memory>

#include "bindings.h"
#include "ops/optim.h"

namespace py = pybind11;

namespace nexus::python {
namespace {

using ops::optim::Config;
using ops::optim::State;
using MaybeTensors = std::vector<std::optional<Tensor>>;

MaybeTensors to_maybe(const std::vector<Tensor>& ts) {
  MaybeTensors out;
  for (const Tensor& t : ts) out.push_back(t.defined() ? std::optional<Tensor>(t) : std::nullopt);
  return out;
}

std::vector<Tensor> from_maybe(const MaybeTensors& ts) {
  std::vector<Tensor> out;
  for (const auto& t : ts) out.push_back(t ? *t : Tensor());
  return out;
}

}  // namespace

void bind_optim(py::module_& root) {
  py::module_ m = root.def_submodule("optim", "Fused optimizer updates (see nexus.optim)");
  auto nogil = py::call_guard<py::gil_scoped_release>();
  py::class_<Config> config(m, "Config");
  py::enum_<Config::Kind>(config, "Kind")
      .value("SGD", Config::Kind::SGD)
      .value("Adam", Config::Kind::Adam)
      .value("AdamW", Config::Kind::AdamW);
  config
      .def(py::init([](Config::Kind kind, double momentum, double dampening, bool nesterov, double beta1, double beta2,
                       double eps, double weight_decay, double clip) {
             return Config{kind, momentum, dampening, nesterov, beta1, beta2, eps, weight_decay, clip};
           }),
           py::kw_only(), py::arg("kind") = Config::Kind::SGD, py::arg("momentum") = 0.0, py::arg("dampening") = 0.0,
           py::arg("nesterov") = false, py::arg("beta1") = 0.9, py::arg("beta2") = 0.999, py::arg("eps") = 1e-8,
           py::arg("weight_decay") = 0.0, py::arg("clip_norm") = 0.0)
      .def_readwrite("kind", &Config::kind)
      .def_readwrite("momentum", &Config::momentum)
      .def_readwrite("dampening", &Config::dampening)
      .def_readwrite("nesterov", &Config::nesterov)
      .def_readwrite("beta1", &Config::beta1)
      .def_readwrite("beta2", &Config::beta2)
      .def_readwrite("eps", &Config::eps)
      .def_readwrite("weight_decay", &Config::weight_decay)
      .def_readwrite("clip_norm", &Config::clip_norm);

  py::class_<State, std::shared_ptr<State>>(m, "State")
      .def(py::init<>())
      .def_readwrite("step", &State::step)
      .def_readwrite("param_steps", &State::param_steps)
      .def_property(
          "m", [](const State& s) { return to_maybe(s.m); },
          [](State& s, const MaybeTensors& ts) { s.m = from_maybe(ts); })
      .def_property(
          "v", [](const State& s) { return to_maybe(s.v); },
          [](State& s, const MaybeTensors& ts) { s.v = from_maybe(ts); });

  m.def("validate", &ops::optim::validate, py::arg("config"), py::arg("lr"));
  m.def(
      "step",
      [](const Config& c, double lr, const std::vector<Tensor>& params, const MaybeTensors& grads, State& s) {
        ops::optim::step(c, lr, params, from_maybe(grads), s);
      },
      py::arg("config"), py::arg("lr"), py::arg("params"), py::arg("grads"), py::arg("state"), nogil);
  m.def(
      "global_grad_norm", [](const MaybeTensors& g) { return ops::optim::global_grad_norm(from_maybe(g)); },
      py::arg("grads"), nogil);
  m.def(
      "clip_grad_norm",
      [](const MaybeTensors& g, double max_norm) { return ops::optim::clip_grad_norm(from_maybe(g), max_norm); },
      py::arg("grads"), py::arg("max_norm"), nogil);
}

}  // namespace nexus::python
