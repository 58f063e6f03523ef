// Liveness-based buffer planning: activations whose lifetimes do not overlap share arena space.
#include <algorithm>
#include <map>

#include "graph/passes/passes.h"

namespace nexus::graph {

// A value's buffer: its bytes rounded up to a 64-byte line.
static int64_t bytes_of(const Graph& g, int v, int64_t batch) { return (g.value_bytes(v, batch) + 63) / 64 * 64; }

static bool planned(OpKind k) { return k != OpKind::Input && k != OpKind::Param && k != OpKind::Buffer; }

MemoryPlan plan_memory(const Graph& g, const std::vector<bool>& run, int64_t batch) {
  MemoryPlan plan;
  plan.batch = batch;
  plan.offsets.assign(g.values().size(), -1);
  std::vector<int> last = last_uses(g, run);
  // The model's results outlive the pass: they are read after the last node. Parameter
  // gradients are counted apart: they are the optimizer's input, sized like the parameters.
  std::vector<bool> is_grad(g.values().size(), false);
  for (int v : g.param_grads)
    if (v >= 0) is_grad[size_t(v)] = true;
  for (int v : {g.output, g.loss})
    if (v >= 0) last[size_t(v)] = int(g.nodes().size());
  std::map<int64_t, int64_t> free_blocks;  // offset -> size
  int64_t top = 0;
  auto release = [&](int64_t off, int64_t size) {
    auto next = free_blocks.lower_bound(off);
    if (next != free_blocks.end() && off + size == next->first) {  // merge with the next block
      size += next->second;
      next = free_blocks.erase(next);
    }
    if (next != free_blocks.begin()) {  // merge with the previous block
      auto prev = std::prev(next);
      if (prev->first + prev->second == off) {
        prev->second += size;
        return;
      }
    }
    free_blocks[off] = size;
  };
  auto allocate = [&](int64_t size) {
    for (auto it = free_blocks.begin(); it != free_blocks.end(); ++it) {
      if (it->second < size) continue;
      int64_t off = it->first, rest = it->second - size;
      free_blocks.erase(it);
      if (rest) free_blocks[off + size] = rest;
      return off;
    }
    int64_t off = top;
    top += size;
    return off;
  };
  std::vector<std::vector<int>> dies_at(g.nodes().size() + 1);
  for (size_t v = 0; v < last.size(); ++v)
    if (last[v] >= 0) dies_at[size_t(last[v])].push_back(int(v));
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    if (!run[i] || !planned(n.kind)) continue;
    for (int v : n.outputs) {
      if (v < 0) continue;
      int64_t size = bytes_of(g, v, batch);
      if (is_grad[size_t(v)]) {
        plan.grad_bytes += size;
        continue;
      }
      plan.total_bytes += size;
      plan.offsets[size_t(v)] = allocate(size);
      if (last[size_t(v)] < 0) dies_at[i].push_back(v);  // never read: dead right away
    }
    for (int v : dies_at[i])
      if (plan.offsets[size_t(v)] >= 0) release(plan.offsets[size_t(v)], bytes_of(g, v, batch));
  }
  plan.peak_bytes = top;
  return plan;
}

}  // namespace nexus::graph
