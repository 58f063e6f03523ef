"""Shape inference while building: each layer infers only its new nodes (building is linear in
depth), the result equals inferring the whole graph at once, and a rolled-back builder's cached
shapes match its graph."""

from __future__ import annotations

import pytest

from nexus import _C
from nexus.graph import GraphBuilder, Shape


def dense_stack(depth: int, width: int = 4) -> GraphBuilder:
    g = GraphBuilder(seed=0).input("x", Shape(2, width))
    for _ in range(depth):
        g.dense(width, "relu")
    return g


def shapes(graph) -> list:
    return [(tuple(graph.value_shape(v)), graph.value_dtype(v)) for v in range(graph.num_values)]


def assert_same_as_whole_graph_inference(g: GraphBuilder) -> None:
    """The builder's shapes are what inferring its whole graph from scratch gives, and its cached
    state covers exactly the graph's nodes."""
    assert g._shapes.inferred == g._graph.num_nodes
    built = shapes(g._graph)
    g._graph.infer_shapes()  # every node again, with fresh dummies
    assert shapes(g._graph) == built


def cnn_with_branches() -> GraphBuilder:
    g = GraphBuilder(seed=1).input("img", Shape(2, 1, 8, 8))
    g.conv2d(4, 3, padding="same", activation="relu").batch_norm()
    skip = g.tap()
    g.residual(lambda b: b.conv2d(4, 3, padding=1).activation("gelu"))
    g.concat(skip).max_pool2d(2).avg_pool2d((2, 1)).flatten().layer_norm().dropout(0.2)
    return g.dense(3, "softmax")


def test_building_a_200_layer_stack_infers_each_node_once():
    g = dense_stack(200)
    # linear: one visit per node (re-inferring the graph after every layer would be ~n^2/2)
    assert g._shapes.nodes_inferred == g._graph.num_nodes
    assert g.shape_of(g.tap()) == (None, 4)


def test_incremental_inference_equals_whole_graph_inference():
    g = cnn_with_branches()
    assert g._shapes.nodes_inferred == g._graph.num_nodes
    assert_same_as_whole_graph_inference(g)


def test_after_a_rollback_the_cached_shapes_match_the_graph():
    g = GraphBuilder(seed=3).input("x", Shape(2, 6)).dense(8, "relu")
    with pytest.raises(ValueError, match=r"layer 'add_1' \(add\)"):
        g.residual(lambda b: b.dense(8).dense(5))  # 5 != 8: fails after two layers were inferred
    with pytest.raises(ValueError, match=r"layer 'conv2d_1' \(conv2d\)"):
        g.conv2d(2, 3)  # fails inside shape inference itself
    # the replayed builder inferred its (shorter) graph once, and building goes on from there
    assert g._shapes.nodes_inferred == g._graph.num_nodes
    assert_same_as_whole_graph_inference(g)
    g.residual(lambda b: b.dense(8, "tanh")).dense(3, "softmax")
    assert_same_as_whole_graph_inference(g)
    clean = GraphBuilder(seed=3).input("x", Shape(2, 6)).dense(8, "relu")
    clean.residual(lambda b: b.dense(8, "tanh")).dense(3, "softmax")
    assert shapes(g._graph) == shapes(clean._graph)


def test_compile_infers_only_the_labels_and_the_loss():
    model = dense_stack(5).compile()
    b = model.builder  # the compiled replay: its layers, then the labels input and the loss
    assert b._shapes.nodes_inferred == b._graph.num_nodes
    assert_same_as_whole_graph_inference(b)


def test_shape_inference_runs_from_where_it_stopped_or_from_any_earlier_node():
    g = dense_stack(3)._graph
    s = _C.ShapeInference()
    s.infer(g)
    assert s.inferred == s.nodes_inferred == g.num_nodes
    s.infer(g)  # nothing new: nothing visited
    assert s.nodes_inferred == g.num_nodes
    s.infer(g, from_node=2)  # again from node 2 (earlier nodes keep their dummies)
    assert s.nodes_inferred == 2 * g.num_nodes - 2 and s.inferred == g.num_nodes


def test_shape_inference_refuses_a_start_past_what_it_inferred_and_another_graph():
    g = dense_stack(3)._graph
    s = _C.ShapeInference()
    s.infer(g, from_node=0)
    with pytest.raises(ValueError, match=r"from_node 100 is past the \d+ nodes inferred so far; valid: 0\.\."):
        s.infer(g, from_node=100)
    fresh = _C.ShapeInference()
    with pytest.raises(ValueError, match="from_node 1 is past the 0 nodes"):
        fresh.infer(g, from_node=1)
    with pytest.raises(ValueError, match="belongs to another graph; use one per graph"):
        s.infer(dense_stack(1)._graph)


def test_a_failing_node_names_its_layer_and_the_nodes_before_it_stay_inferred():
    g = _C.Graph()
    x = g.add_input("x", [_C.kBatch, 4], _C.DType.float32)
    w = g.add_param("w", [5, 3], _C.DType.float32)
    s = _C.ShapeInference()
    s.infer(g)
    g.add_node(_C.OpKind.matmul, [x, w], "proj")
    with pytest.raises(ValueError, match=r"layer 'proj' \(matmul\)"):
        s.infer(g)
    assert s.inferred == g.num_nodes - 1  # the failing node is inferred again by the next call
    with pytest.raises(ValueError, match=r"layer 'proj' \(matmul\)"):
        s.infer(g)

