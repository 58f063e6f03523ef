// graph::fold_conv_epilogues (passes.h): a convolution's Add and ReLU run as it stores its output.
//
// In a ResNet-style inference graph every convolution is followed by a ReLU, or by the residual
// Add and then a ReLU: two more passes over the activation, each an op's dispatch and allocation
// at batch 1 and a trip through memory at large batches. The direct kernel applies them to each
// block of outputs it has in registers instead (ops::conv2d_epilogue).
#include <string>

#include "graph/passes/passes.h"

namespace nexus::graph {

int fold_conv_epilogues(Graph& g, const std::vector<int>& roots) {
  std::vector<Node>& nodes = g.nodes();
  std::vector<Value>& values = g.values();
  std::vector<int> readers(values.size(), 0), reader(values.size(), -1);  // how many; the last one
  for (size_t i = 0; i < nodes.size(); ++i)
    for (int v : nodes[i].inputs) ++readers[size_t(v)], reader[size_t(v)] = int(i);
  for (int r : roots) readers[size_t(r)] += 2;  // a root's value is kept: never "only read by"
  auto only_reader = [&](int v) { return readers[size_t(v)] == 1 ? reader[size_t(v)] : -1; };
  auto is = [&](int i, OpKind kind) { return i >= 0 && nodes[size_t(i)].kind == kind; };

  std::vector<bool> removed(nodes.size(), false);
  for (size_t c = 0; c < nodes.size(); ++c) {
    Node& conv = nodes[c];
    if (conv.kind != OpKind::Conv2d || conv.attrs.ints.size() != 5 || conv.outputs.size() != 1) continue;
    const Value& y = values[size_t(conv.outputs[0])];
    if (y.dtype != DType::Float32 && y.dtype != DType::Float64) continue;
    int64_t epilogue = 0;
    int out = conv.outputs[0], residual = -1, next = only_reader(out);
    std::string name = conv.name;
    if (is(next, OpKind::Binary) && nodes[size_t(next)].attrs.binary == ops::BinaryOp::Add) {
      const Node& add = nodes[size_t(next)];
      const int other = add.inputs[0] == out ? add.inputs[1] : add.inputs[0];
      const Value& r = values[size_t(other)];
      // the other operand: the output's shape and dtype (no broadcast), ready before the conv runs
      if (other != out && r.shape == y.shape && r.dtype == y.dtype && r.producer < int(c)) {
        epilogue |= kEpilogueAdd;
        residual = other;
        removed[size_t(next)] = true;
        name += " + " + add.name;
        out = add.outputs[0];
        next = only_reader(out);
      }
    }
    if (is(next, OpKind::Unary) && nodes[size_t(next)].attrs.unary == ops::UnaryOp::Relu) {
      epilogue |= kEpilogueRelu;
      removed[size_t(next)] = true;
      name += " + " + nodes[size_t(next)].name;
      out = nodes[size_t(next)].outputs[0];
    }
    if (epilogue == 0) continue;
    values[size_t(conv.outputs[0])].producer = -1;  // the conv's own value: now read by nothing
    conv.outputs = {out};
    values[size_t(out)].producer = int(c);
    if (residual >= 0) {
      const bool bias = !(conv.attrs.absent >> 2 & 1u);  // input 2 (the bias), when it is there
      conv.inputs.resize(bias ? 3 : 2);
      conv.inputs.push_back(residual);
    }
    conv.attrs.ints.push_back(epilogue);
    conv.name = name;
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
