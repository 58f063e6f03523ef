// Graph IR and CompiledModel bindings. python/nexus/graph.py (GraphBuilder) drives them.
#include <pybind11/stl.h>

#include <optional>

#include <stdexcept>

#include "bindings.h"
#include "engine/compiled_model.h"
#include "engine/executor.h"
#include "engine/traced.h"
#include "engine/shape_infer.h"
#include "graph/passes/passes.h"
#include "ops/ops.h"
#include "tensor/tape.h"

namespace py = pybind11;

namespace nexus::python {

using graph::Graph;
using graph::OpKind;

static graph::Attrs attrs(ops::UnaryOp u, ops::BinaryOp b, std::vector<int64_t> ints, std::vector<double> floats,
                          ReduceOp reduce) {
  return graph::Attrs{u, b, std::move(ints), std::move(floats), reduce, false};
}

// A GradReducer written in Python (tests, experiments): each call takes the GIL back.
struct PyGradReducer : engine::GradReducer {
  void begin(int64_t samples) override { PYBIND11_OVERRIDE_PURE(void, engine::GradReducer, begin, samples); }
  void on_grad_ready(size_t param, const Tensor& grad) override {
    PYBIND11_OVERRIDE_PURE(void, engine::GradReducer, on_grad_ready, param, grad);
  }
  double finish(const std::vector<Tensor>& grads, double loss) override {
    PYBIND11_OVERRIDE_PURE(double, engine::GradReducer, finish, grads, loss);
  }
};

void bind_graph(py::module_& m) {
  py::enum_<OpKind> kind(m, "OpKind");
  for (int k = int(OpKind::Input); k <= int(OpKind::Opaque); ++k) kind.value(graph::kind_name(OpKind(k)), OpKind(k));
  m.attr("kBatch") = graph::kBatch;

  py::class_<Graph>(m, "Graph")
      .def(py::init<>())
      .def("add_input", &Graph::add_input)
      .def("add_param", &Graph::add_param, py::arg("name"), py::arg("shape"), py::arg("dtype") = DType::Float32)
      .def("add_buffer", &Graph::add_buffer, py::arg("name"), py::arg("shape"), py::arg("dtype") = DType::Float32)
      .def(
          "add_node",
          [](Graph& g, OpKind k, std::vector<int> in, const std::string& name, ops::UnaryOp u, ops::BinaryOp b,
             std::vector<int64_t> ints, std::vector<double> floats, ReduceOp reduce) {
            graph::Attrs a = attrs(u, b, std::move(ints), std::move(floats), reduce);
            return g.add_node(k, std::move(in), std::move(a), name, {});
          },
          py::arg("kind"), py::arg("inputs"), py::arg("name"), py::arg("unary") = ops::UnaryOp::Neg,
          py::arg("binary") = ops::BinaryOp::Add, py::arg("ints") = std::vector<int64_t>{},
          py::arg("floats") = std::vector<double>{}, py::arg("reduce") = ReduceOp::None)
      .def(
          "add_traced",
          [](Graph& g, OpKind k, std::vector<int> in, const std::string& name, ops::UnaryOp u, ops::BinaryOp b,
             std::vector<int64_t> ints, std::vector<double> floats, ReduceOp reduce, bool keepdims, Shape shape,
             DType dtype, uint32_t absent) {
            graph::Attrs a = attrs(u, b, std::move(ints), std::move(floats), reduce);
            a.keepdims = keepdims;
            a.absent = absent;
            return g.add_node(k, std::move(in), std::move(a), name, std::move(shape), dtype);
          },
          py::arg("kind"), py::arg("inputs"), py::arg("name"), py::arg("unary"), py::arg("binary"), py::arg("ints"),
          py::arg("floats"), py::arg("reduce"), py::arg("keepdims"), py::arg("shape"), py::arg("dtype"),
          py::arg("absent") = 0)
      .def("value_shape", [](const Graph& g, int v) { return g.value(v).shape; })
      .def("value_dtype", [](const Graph& g, int v) { return g.value(v).dtype; })
      .def("infer_shapes", &engine::infer_shapes)
      .def("dump", &Graph::dump)
      .def("node_output", [](const Graph& g, size_t i) { return g.nodes().at(i).outputs.at(0); })
      .def("node_kind", [](const Graph& g, size_t i) { return g.nodes().at(i).kind; })
      .def(
          "differentiate",
          [](Graph& g, int loss, const std::vector<int>& wrt) {
            // The backward of `loss` (a scalar) with respect to the values `wrt`, appended to the
            // graph by autodiff (as a compiled model's is); returns each one's gradient value.
            NX_CHECK(loss >= 0 && size_t(loss) < g.values().size(), "differentiate: loss value ", loss,
                     " is not in the graph");
            NX_CHECK(g.value(loss).shape.empty(), "differentiate: the loss must be a scalar, got shape ",
                     shape_str(g.value(loss).shape));
            const std::vector<int> params = g.params;
            g.loss = loss;
            g.params = wrt;
            graph::autodiff(g, /*constant_seed=*/true);
            std::vector<int> grads = g.param_grads;
            g.params = params;
            g.param_grads.clear();
            return grads;
          },
          py::arg("loss"), py::arg("wrt"))
      .def_readwrite("output", &Graph::output)
      .def_readwrite("loss", &Graph::loss)
      .def_readonly("params", &Graph::params)
      .def_readonly("buffers", &Graph::buffers)
      .def_property_readonly("num_nodes", [](const Graph& g) { return g.nodes().size(); })
      .def_property_readonly("num_values", [](const Graph& g) { return g.values().size(); });

  py::class_<engine::ShapeInference>(m, "ShapeInference")
      .def(py::init<>())
      .def(
          "infer",
          [](engine::ShapeInference& s, Graph& g, std::optional<size_t> from_node) {
            s.infer(g, from_node.value_or(s.inferred()));
          },
          py::arg("graph"), py::arg("from_node") = py::none())
      .def_property_readonly("inferred", &engine::ShapeInference::inferred)
      .def_property_readonly("nodes_inferred", &engine::ShapeInference::nodes_inferred);

  // nx.jit of a scalar function of tensors that require grad: its program computes the value and
  // the gradients at once; this records the value on the tape with a backward that scales them.
  m.def(
      "attach_gradients",
      [](Tensor out, const std::vector<Tensor>& inputs, const std::vector<Tensor>& grads) {
        NX_CHECK(inputs.size() == grads.size(), "attach_gradients: ", grads.size(), " gradients for ", inputs.size(),
                 " inputs");
        NX_CHECK(out.ndim() == 0, "attach_gradients: the value must be a scalar, got ", shape_str(out.shape()));
        // loss.backward() seeds 1: the gradients go to the inputs as they are, with no pass over
        // them (scaling by 1, then a copy of a tensor this closure still holds), so only once;
        // another seed scales them, as often as asked.
        auto held = std::make_shared<std::vector<Tensor>>(grads);
        return autograd::record(
            "nx.jit", std::move(out), inputs, [held](const Tensor& g, const std::vector<bool>& needs) {
              if (held->empty())
                throw std::runtime_error(
                    "nx.jit: backward() through this result a second time: its gradients went to the inputs the "
                    "first time; call the function again for another backward");
              bool one = g.device().is_cpu() && g.numel() == 1 &&
                         ((g.dtype() == DType::Float32 && *g.data<float>() == 1.0f) ||
                          (g.dtype() == DType::Float64 && *g.data<double>() == 1.0));
              for (const Tensor& t : *held) one = one && (!t.defined() || t.dtype() == g.dtype());
              std::vector<Tensor> result(held->size());
              for (size_t i = 0; i < held->size(); ++i)
                if (needs[i] && (*held)[i].defined()) result[i] = one ? std::move((*held)[i]) : ops::mul((*held)[i], g);
              if (one) held->clear();
              return result;
            });
      },
      py::arg("out"), py::arg("inputs"), py::arg("grads"));

  auto nogil = py::call_guard<py::gil_scoped_release>();
  py::class_<engine::TracedProgram>(m, "TracedProgram")
      .def(py::init<Graph, std::vector<int>, bool, bool>(), py::arg("graph"), py::arg("roots"), py::arg("fuse") = true,
           py::arg("epilogues") = false)
      .def("run", &engine::TracedProgram::run, py::arg("inputs"), nogil)
      .def("profile", &engine::TracedProgram::profile, py::arg("inputs"), nogil)
      .def_property_readonly(
          "plan",
          [](const engine::TracedProgram& p) { return p.fusion() ? p.fusion()->plan : codegen::CompiledPlan{}; })
      .def_property_readonly("live", &engine::TracedProgram::live)
      .def_property_readonly("node_names",
                             [](const engine::TracedProgram& p) {
                               std::vector<std::string> names;
                               for (const auto& n : p.graph().nodes()) names.push_back(n.name);
                               return names;
                             })
      .def("dump", [](const engine::TracedProgram& p) { return p.graph().dump(); });

  // Shared-pointer held, so nexus._C_mpi's DataParallelReducer (a subclass) passes as one.
  py::class_<engine::GradReducer, PyGradReducer, std::shared_ptr<engine::GradReducer>>(m, "GradReducer")
      .def(py::init<>())
      .def("begin", &engine::GradReducer::begin, py::arg("samples"))
      .def("on_grad_ready", &engine::GradReducer::on_grad_ready, py::arg("param"), py::arg("grad"))
      .def("finish", &engine::GradReducer::finish, py::arg("grads"), py::arg("loss"));

  py::class_<engine::CompiledModel>(m, "CompiledModel")
      .def(py::init<Graph, std::vector<Tensor>, std::vector<Tensor>, bool>(), py::arg("graph"), py::arg("params"),
           py::arg("buffers"), py::arg("fuse") = true)
      .def(
          "fusion_groups",
          [](const engine::CompiledModel& c, int64_t batch) {
            // One dict per fused kernel (forward and backward): its layers and nodes, and the bytes
            // its ops read and write one by one vs. the kernel's inputs and outputs, at this batch size.
            const Graph& g = c.graph();
            py::list out;
            if (!c.fusion()) return out;
            for (const auto& fg : c.fusion()->plan.groups) {
              py::list names;
              for (int n : fg.group.nodes) names.append(g.nodes()[size_t(n)].name);
              out.append(py::dict(py::arg("layers") = names, py::arg("nodes") = fg.group.nodes,
                                  py::arg("ops") = fg.group.nodes.size(), py::arg("kernel") = fg.program->name(),
                                  py::arg("program") = fg.program,
                                  py::arg("bytes_unfused") = graph::unfused_bytes(g, fg.group, batch),
                                  py::arg("bytes_fused") = graph::fused_bytes(g, fg.group, batch)));
            }
            return out;
          },
          py::arg("batch"))
      .def(
          "step_traffic",
          [](const engine::CompiledModel& c, int64_t batch) {
            engine::CompiledModel::Traffic t = c.step_traffic(batch);
            return py::dict(py::arg("unfused") = t.unfused, py::arg("fused") = t.fused);
          },
          py::arg("batch"))
      .def(
          "forward_backward",
          [](engine::CompiledModel& c, const Tensor& x, const Tensor& y) { return c.forward_backward(x, y); },
          py::arg("x"), py::arg("y"), nogil)
      .def("profile", &engine::CompiledModel::profile, py::arg("x"), py::arg("y"), nogil)
      .def("train_step", &engine::CompiledModel::train_step, py::arg("x"), py::arg("y"), py::arg("opt"), py::arg("lr"),
           py::arg("state"), py::arg("reducer") = nullptr, nogil)
      .def("predict", &engine::CompiledModel::predict, nogil)
      .def("evaluate_loss", &engine::CompiledModel::evaluate_loss, nogil)
      .def("to", &engine::CompiledModel::to, py::arg("device"), nogil)
      .def_property_readonly("device", &engine::CompiledModel::device)
      .def_property_readonly("params", &engine::CompiledModel::params)
      .def_property_readonly("buffers", &engine::CompiledModel::buffers)
      .def_property_readonly("grads", &engine::CompiledModel::grads)
      .def("dump", [](const engine::CompiledModel& c) { return c.graph().dump(); })
      .def(
          "memory_stats",
          [](const engine::CompiledModel& c, int64_t batch) {
            engine::MemoryStats m = c.memory_stats(batch);
            return py::dict(py::arg("batch") = m.batch, py::arg("peak_bytes") = m.peak_bytes,
                            py::arg("total_bytes") = m.total_bytes, py::arg("grad_bytes") = m.grad_bytes);
          },
          py::arg("batch"));
}

}  // namespace nexus::python
