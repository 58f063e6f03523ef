// pybind11 bindings only: convert arguments, release the GIL, call the core, convert results.
#pragma once

#include <pybind11/pybind11.h>

#include "tensor/tensor.h"

namespace nexus::python {

void bind_errors(pybind11::module_& m);
pybind11::class_<Tensor> bind_tensor(pybind11::module_& m);
void bind_buffer(pybind11::module_& m, pybind11::class_<Tensor>& tensor);
void bind_ops(pybind11::module_& m);
void bind_info(pybind11::module_& m);
void bind_graph(pybind11::module_& m);
void bind_data(pybind11::module_& m);
void bind_optim(pybind11::module_& m);
void bind_comm(pybind11::module_& m);
void bind_codegen(pybind11::module_& m);

}  // namespace nexus::python
