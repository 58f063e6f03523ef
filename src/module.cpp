#include "bindings.h"

PYBIND11_MODULE(_C, m) {
  m.doc() = "Nexus native core: tensors, autograd and kernels";
  nexus::python::bind_errors(m);
  auto tensor = nexus::python::bind_tensor(m);
  nexus::python::bind_buffer(m, tensor);
  nexus::python::bind_ops(m);
  nexus::python::bind_info(m);
  nexus::python::bind_graph(m);
  nexus::python::bind_data(m);
  nexus::python::bind_optim(m);
  nexus::python::bind_comm(m);
  nexus::python::bind_codegen(m);
}
