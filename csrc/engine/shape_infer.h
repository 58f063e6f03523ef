// Shape inference: fills each value's shape and dtype by running the forward nodes on a dummy
// batch of 2 (the batch dim is recorded as kBatch). It lives in engine/, not graph/passes/,
// because it runs nodes (run_forward_node): the IR never knows how it is run.
#pragma once

#include <cstddef>
#include <vector>

#include "graph/ir.h"

namespace nexus::engine {

// Incremental shape inference over one graph that only grows (GraphBuilder adds a layer, infers
// the new nodes, adds the next): it keeps the dummy result of every node it ran, so each call
// runs only the nodes added since the last one and building a model is linear in its depth.
// Sources (inputs, params, buffers) are zeros of their declared shape, made when a node reads
// them, so no copy of the parameters is held. A failing node raises its error prefixed with the
// layer's name, with its type kept (ValueError, TypeError, IndexError); the nodes before it stay
// inferred. Use one ShapeInference per graph (a rebuilt graph gets a new one).
//
//   engine::ShapeInference shapes;
//   int x = g.add_input("x", {graph::kBatch, 8}, DType::Float32);  // ... add nodes
//   shapes.infer(g);  // nodes [0, n)
//   // ... add more nodes
//   shapes.infer(g);  // only the new ones
class ShapeInference {
 public:
  // Infers nodes [from_node, end of g), keeping what earlier calls inferred before from_node.
  // Throws ValueError when from_node is past the nodes inferred so far (they would be read
  // uninferred) or when g has fewer nodes than were inferred (it is another graph).
  void infer(graph::Graph& g, size_t from_node);
  // Infers the nodes added since the last call.
  void infer(graph::Graph& g) { infer(g, inferred_); }

  // Nodes [0, inferred()) of the graph are inferred: where the next infer(g) starts.
  size_t inferred() const { return inferred_; }
  // How many nodes all calls together have visited (a graph built layer by layer and inferred
  // after each layer visits each node once).
  size_t nodes_inferred() const { return nodes_inferred_; }

 private:
  Tensor dummy(const graph::Graph& g, int value) const;  // the dummy tensor a node reads

  std::vector<Tensor> env_;  // per value: the dummy a node computed (undefined for sources)
  size_t inferred_ = 0;
  size_t nodes_inferred_ = 0;
};

// Infers every node of g once (a fresh ShapeInference over the whole graph).
void infer_shapes(graph::Graph& g);

}  // namespace nexus::engine
