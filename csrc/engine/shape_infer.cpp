#include "engine/shape_infer.h"

#include "engine/executor.h"
#include "ops/ops.h"
#include "tensor/tape.h"

namespace nexus::engine {

using graph::kBatch;
using graph::Node;
using graph::OpKind;

static constexpr int64_t kDummyBatch = 2;

static bool is_source(OpKind k) { return k == OpKind::Input || k == OpKind::Param || k == OpKind::Buffer; }

// Rethrows the current exception with the layer named, keeping its type.
[[noreturn]] static void rethrow_naming(const Node& n) {
  std::string where = str("layer '", n.name, "' (", graph::kind_name(n.kind), "): ");
  try {
    throw;
  } catch (const TypeError& e) {
    throw TypeError(where + e.what());
  } catch (const IndexError& e) {
    throw IndexError(where + e.what());
  } catch (const ValueError& e) {
    throw ValueError(where + e.what());
  }
}

Tensor ShapeInference::dummy(const graph::Graph& g, int value) const {
  const Tensor& t = env_[size_t(value)];
  const graph::Value& v = g.value(value);
  if (t.defined() || v.producer < 0 || !is_source(g.nodes()[size_t(v.producer)].kind)) return t;
  Shape s = v.shape;
  for (int64_t& d : s) d = d == kBatch ? kDummyBatch : d;
  return Tensor::zeros(s, v.dtype);
}

void ShapeInference::infer(graph::Graph& g, size_t from_node) {
  const size_t end = g.nodes().size();
  NX_CHECK(end >= inferred_, "ShapeInference.infer: the graph has ", end, " nodes but ", inferred_,
           " were inferred: this ShapeInference belongs to another graph; use one per graph");
  NX_CHECK(from_node <= inferred_, "ShapeInference.infer: from_node ", from_node, " is past the ", inferred_,
           " nodes inferred so far; valid: 0..", inferred_);
  autograd::NoGradGuard no_grad;
  env_.resize(g.values().size());
  inferred_ = from_node;
  for (size_t i = from_node; i < end; ++i, inferred_ = i) {
    ++nodes_inferred_;
    Node& n = g.nodes()[i];
    if (n.kind == OpKind::OnesLike || is_source(n.kind)) continue;
    int out = n.outputs[0];
    graph::Value& v = g.values()[size_t(out)];
    std::vector<Tensor> present;
    for (int id : n.inputs) present.push_back(dummy(g, id));
    std::vector<Tensor> in = with_absent(n, std::move(present));
    Tensor& t = env_[size_t(out)];
    try {
      if (n.kind == OpKind::Binary) {  // metadata only: a placeholder 0 must not divide integers
        const ops::BinaryOp op = n.attrs.binary;
        t = Tensor::zeros(ops::binary_shape(op, in[0], in[1]),
                          ops::binary_result_dtype(op, in[0].dtype(), in[1].dtype()));
      } else {
        t = typed(n.kind) ? run_typed_node(n, in, v) : run_forward_node(n, in, /*training=*/false);
      }
    } catch (const std::invalid_argument&) {
      rethrow_naming(n);
    } catch (const std::out_of_range&) {
      rethrow_naming(n);
    }
    v.shape = t.shape();
    v.dtype = t.dtype();
    // Dim 0 is the batch where an input carries it (an op on parameters alone has none) and the
    // result kept it (batch_norm_stats' statistics, a loss: one for the whole batch).
    bool batched = false;
    for (int id : n.inputs) {
      const Shape& s = g.value(id).shape;
      batched = batched || (!s.empty() && s[0] == kBatch);
    }
    if (batched && !v.shape.empty() && v.shape[0] == kDummyBatch) v.shape[0] = kBatch;
  }
}

void infer_shapes(graph::Graph& g) { ShapeInference().infer(g, 0); }

}  // namespace nexus::engine
