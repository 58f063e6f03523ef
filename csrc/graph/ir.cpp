#include "graph/ir.h"

#include "graph/passes/passes.h"

#include <sstream>

namespace nexus::graph {

const char* kind_name(OpKind k) {
  static const char* names[] = {"input",
                                "param",
                                "buffer",
                                "unary",
                                "binary",
                                "matmul",
                                "reshape",
                                "conv2d",
                                "max_pool2d",
                                "avg_pool2d",
                                "dropout",
                                "batch_norm",
                                "batch_norm_stats",
                                "layer_norm",
                                "softmax",
                                "log_softmax",
                                "cross_entropy",
                                "concat",
                                "ones_like",
                                "slice_grad",
                                "index_select_grad",
                                "conv2d_grad",
                                "max_pool2d_grad",
                                "avg_pool2d_grad",
                                "cross_entropy_grad",
                                "const",
                                "cast",
                                "where",
                                "reduce",
                                "fill",
                                "arange",
                                "rand",
                                "randn",
                                "permute",
                                "expand",
                                "slice",
                                "select",
                                "unsqueeze",
                                "index_select",
                                "stack",
                                "contiguous",
                                "argmax",
                                "var",
                                "logsumexp",
                                "detach",
                                "opaque"};
  static_assert(sizeof(names) / sizeof(names[0]) == size_t(OpKind::Opaque) + 1, "one name per kind");
  return names[int(k)];
}

int64_t Graph::value_bytes(int id, int64_t batch) const {
  const Value& v = value(id);
  int64_t n = itemsize(v.dtype);
  for (int64_t d : v.shape) n *= d == kBatch ? batch : d;
  return n;
}

int64_t Graph::node_bytes(const Node& n, int64_t batch) const {
  // A view (what the backward's transposes and broadcasts are) moves no bytes: its reader reads.
  const OpKind k = n.kind;
  if (k == OpKind::Permute || k == OpKind::Expand || k == OpKind::Unsqueeze || k == OpKind::Select ||
      k == OpKind::Slice)
    return 0;
  int64_t b = 0;
  for (int v : n.inputs) b += value_bytes(v, batch);
  for (int v : n.outputs)
    if (v >= 0) b += value_bytes(v, batch);
  return b;
}

int Graph::add_value(Shape shape, DType dtype, std::string name) {
  values_.push_back(Value{std::move(shape), dtype, -1, std::move(name)});
  return int(values_.size()) - 1;
}

int Graph::add_node(OpKind kind, std::vector<int> inputs_in, Attrs attrs, std::string name, Shape shape, DType dtype) {
  for (int v : inputs_in) NX_ASSERT(v >= 0 && v < int(values_.size()), "node ", name, " reads unknown value ", v);
  int out = add_value(std::move(shape), dtype, name);
  values_[size_t(out)].producer = int(nodes_.size());
  nodes_.push_back(Node{kind, std::move(inputs_in), {out}, std::move(attrs), std::move(name)});
  return out;
}

int Graph::add_input(const std::string& name, Shape shape, DType dtype) {
  int v = add_node(OpKind::Input, {}, {}, name, std::move(shape), dtype);
  inputs.push_back(v);
  return v;
}

int Graph::add_param(const std::string& name, Shape shape, DType dtype) {
  int v = add_node(OpKind::Param, {}, {}, name, std::move(shape), dtype);
  params.push_back(v);
  return v;
}

int Graph::add_buffer(const std::string& name, Shape shape, DType dtype) {
  int v = add_node(OpKind::Buffer, {}, {}, name, std::move(shape), dtype);
  buffers.push_back(v);
  return v;
}

void Graph::verify() const {
  std::vector<bool> ready(values_.size(), false);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    for (int v : n.inputs) {
      NX_ASSERT(v >= 0 && v < int(values_.size()), "node ", i, " (", n.name, ") reads value ", v);
      NX_ASSERT(ready[size_t(v)], "node ", i, " (", n.name, ") reads value ", v, " before it is produced");
    }
    for (int v : n.outputs) {
      if (v < 0) continue;
      NX_ASSERT(!ready[size_t(v)], "value ", v, " is produced twice");
      NX_ASSERT(values_[size_t(v)].producer == int(i), "value ", v, " names the wrong producer");
      ready[size_t(v)] = true;
    }
  }
}

std::string Graph::dump() const {
  std::ostringstream os;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    os << i << ": ";
    for (size_t k = 0; k < n.outputs.size(); ++k) os << (k ? ", " : "") << "%" << n.outputs[k];
    os << " = " << kind_name(n.kind);
    if (n.kind == OpKind::Unary) os << "." << ops::op_name(n.attrs.unary);
    if (n.kind == OpKind::Binary) os << "." << ops::op_name(n.attrs.binary);
    if (n.kind == OpKind::Reduce) {
      os << "." << reduce_op_name(n.attrs.reduce) << "[";
      for (size_t k = 0; k < n.attrs.ints.size(); ++k) os << (k ? "," : "") << n.attrs.ints[k];
      os << "]" << (n.attrs.keepdims ? "k" : "");
    }
    if (n.kind == OpKind::Const && !n.attrs.floats.empty()) os << "[" << n.attrs.floats[0] << "]";
    if (const int64_t e = epilogue_of(n)) os << (e & kEpilogueAdd ? "+add" : "") << (e & kEpilogueRelu ? "+relu" : "");
    os << "(";
    for (size_t k = 0; k < n.inputs.size(); ++k) os << (k ? ", " : "") << "%" << n.inputs[k];
    os << ")";
    if (!n.outputs.empty() && n.outputs[0] >= 0) os << " : " << shape_str(values_[size_t(n.outputs[0])].shape);
    os << "  # " << n.name << "\n";
  }
  return os.str();
}

}  // namespace nexus::graph
