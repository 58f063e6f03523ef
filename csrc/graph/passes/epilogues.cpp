// graph::fold_epilogues (passes.h): the Add and ReLU after a convolution or a product run as it
// stores its output.
//
// In a ResNet-style inference graph every convolution is followed by a ReLU, or by the residual
// Add and then a ReLU; an MLP's Gemm by its bias Add and a ReLU. At batch 1 each was an op of its
// own: a dispatch, an allocation and a pass over the output. The direct conv kernel and the packed
// GEMM apply them to the outputs they hold in registers instead (ops::conv2d_epilogue,
// ops::matmul_epilogue), with the ops' own expressions and so their bits.
#include <string>

#include "graph/passes/passes.h"

namespace nexus::graph {
namespace {

// Whether `operand` can be node c's epilogue Add operand, given c's output value y.
bool addable(const Graph& g, const Node& c, const Value& y, int operand) {
  const Value& r = g.value(operand);
  if (r.dtype != y.dtype) return false;
  if (c.kind == OpKind::Conv2d) return r.shape == y.shape;  // the residual
  const int64_t n = y.shape.back();                         // MatMul: a bias of n values
  return (r.shape == Shape{n}) || (r.shape == Shape{1, n});
}

// Whether node c may take an epilogue at all.
bool foldable(const Graph& g, const Node& c) {
  if (c.outputs.size() != 1) return false;
  const Value& y = g.value(c.outputs[0]);
  if (y.dtype != DType::Float32 && y.dtype != DType::Float64) return false;
  if (c.kind == OpKind::Conv2d) return c.attrs.ints.size() == 5;
  return c.kind == OpKind::MatMul && c.attrs.ints.empty() && y.shape.size() >= 2 &&
         g.value(c.inputs[0]).shape.size() >= 2 && g.value(c.inputs[1]).shape.size() == 2;
}

}  // namespace

int64_t epilogue_of(const Node& n) {
  if (n.kind == OpKind::Conv2d && n.attrs.ints.size() > 5) return n.attrs.ints[5];
  if (n.kind == OpKind::MatMul && !n.attrs.ints.empty()) return n.attrs.ints[0];
  return 0;
}

int fold_epilogues(Graph& g, const std::vector<int>& roots) {
  std::vector<Node>& nodes = g.nodes();
  std::vector<Value>& values = g.values();
  std::vector<int> readers(values.size(), 0), reader(values.size(), -1);  // how many; the last one
  for (size_t i = 0; i < nodes.size(); ++i)
    for (int v : nodes[i].inputs) ++readers[size_t(v)], reader[size_t(v)] = int(i);
  for (int r : roots) readers[size_t(r)] += 2;     // a root's value is kept: never "only read by"
  std::vector<bool> removed(nodes.size(), false);  // folded (a folded node's own place among them)
  auto only_reader = [&](int v) { return readers[size_t(v)] == 1 ? reader[size_t(v)] : -1; };
  auto is = [&](int i, OpKind kind) { return i >= 0 && !removed[size_t(i)] && nodes[size_t(i)].kind == kind; };

  // The folded node takes the place of the last node it absorbs: its own inputs are ready there,
  // and so is the Add's other operand (which the Add read), wherever that was computed.
  for (size_t c = 0; c < nodes.size(); ++c) {
    if (!foldable(g, nodes[c])) continue;
    Node node = nodes[c];
    const int y = node.outputs[0];
    int64_t epilogue = 0;
    int out = y, operand = -1, next = only_reader(out), last = -1;
    std::string name = node.name;
    auto named = [&](const std::string& part) {  // the folded node's layer, once (a Gemm's Add is the Gemm)
      if (name.size() < part.size() || name.compare(name.size() - part.size(), part.size(), part) != 0)
        name += " + " + part;
    };
    if (is(next, OpKind::Binary) && nodes[size_t(next)].attrs.binary == ops::BinaryOp::Add) {
      const Node& add = nodes[size_t(next)];
      const int other = add.inputs[0] == out ? add.inputs[1] : add.inputs[0];
      if (other != out && addable(g, node, values[size_t(y)], other)) {
        epilogue |= kEpilogueAdd;
        operand = other;
        last = next;
        named(add.name);
        out = add.outputs[0];
        next = only_reader(out);
      }
    }
    if (is(next, OpKind::Unary) && nodes[size_t(next)].attrs.unary == ops::UnaryOp::Relu) {
      epilogue |= kEpilogueRelu;
      if (last >= 0) removed[size_t(last)] = true;
      last = next;
      named(nodes[size_t(next)].name);
      out = nodes[size_t(next)].outputs[0];
    }
    if (epilogue == 0) continue;
    removed[c] = true;
    values[size_t(y)].producer = -1;  // the node's own value: now read by nothing
    node.outputs = {out};
    values[size_t(out)].producer = last;
    if (node.kind == OpKind::Conv2d) {
      if (operand >= 0) {
        const bool bias = !(node.attrs.absent >> 2 & 1u);  // input 2 (the bias), when it is there
        node.inputs.resize(bias ? 3 : 2);
        node.inputs.push_back(operand);
      }
      node.attrs.ints.push_back(epilogue);
    } else {
      if (operand >= 0) node.inputs.push_back(operand);
      node.attrs.ints = {epilogue};
    }
    node.name = name;
    nodes[size_t(last)] = std::move(node);
  }

  // Drop the folded nodes; the values keep their ids, their producers move with the nodes.
  std::vector<int> index(nodes.size(), -1);
  std::vector<Node> kept;
  int before_end = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (removed[i]) {
      before_end += int(i) < g.forward_end;
      continue;
    }
    index[i] = int(kept.size());
    kept.push_back(std::move(nodes[i]));
  }
  const int dropped = int(nodes.size() - kept.size());
  nodes = std::move(kept);
  for (Value& v : values)
    if (v.producer >= 0) v.producer = index[size_t(v.producer)];
  g.forward_end -= before_end;
  return dropped;
}

}  // namespace nexus::graph
