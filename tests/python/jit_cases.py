"""Shared fused-kernel cases for the jit tests: the same few functions everywhere, so the suite
compiles only a handful of distinct kernels (compiles are slow on a 2-core machine)."""

import nexus as nx


def chain(t):
    """The design's example chain: one fused kernel."""
    return nx.gelu(t * 1.7 + 0.3) * nx.sigmoid(t) - 0.5 * t


def chain_sum(t):
    """An elementwise chain with a reduction epilogue over the last axis."""
    return nx.sum(nx.exp(t) * 2.0 - t, axis=-1)
