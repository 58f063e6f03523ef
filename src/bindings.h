// pybind11 bindings only: convert arguments, release the GIL, call the core, convert results.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "base/reduce_op.h"
#include "tensor/tensor.h"

// A ReduceOp crosses to and from Python as its name ("none", "sum", "mean", "max", "min": the
// strings of torch's reduction= and all_reduce op=), through the core's name table. This is the
// only conversion: an unknown name is a ValueError listing the names, and the function called
// then checks the ops it takes (cross_entropy: none, mean, sum).
namespace pybind11::detail {
template <> struct type_caster<nexus::ReduceOp> {
  PYBIND11_TYPE_CASTER(nexus::ReduceOp, const_name("str"));
  bool load(handle src, bool) {
    if (!isinstance<str>(src)) return false;
    value = nexus::parse_reduce_op(src.cast<std::string>(), "reduction", nexus::kAllReduceOps);
    return true;
  }
  static handle cast(nexus::ReduceOp op, return_value_policy, handle) {
    return str(std::string(nexus::reduce_op_name(op))).release();
  }
};
}  // namespace pybind11::detail

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
