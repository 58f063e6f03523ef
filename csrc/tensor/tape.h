// Eager autograd: every op that produces a tensor from inputs that require grad records a Node
// holding the backward rule (from ops/derivatives.cpp) and one Edge per input. backward() walks
// the nodes in dependency order and accumulates into the leaves' .grad.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace nexus::autograd {

// grad_output → one gradient per input (an undefined Tensor where needs[i] is false).
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output, const std::vector<bool>& needs)>;

struct Edge {
  std::shared_ptr<Node> node;        // the input's producer, or
  std::shared_ptr<TensorImpl> leaf;  // the input itself when it is a leaf requiring grad
  bool active() const { return node || leaf; }
};

struct Node {
  std::string name;
  std::vector<Edge> next;  // one per input
  BackwardFn backward;
};

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;
};

bool grad_enabled();
void set_grad_enabled(bool on);

class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Whether record() would attach a backward for these inputs: grad mode is on and one requires grad.
bool would_record(const std::vector<Tensor>& inputs);

// Attaches `fn` to `out` when grad mode is on and some input requires grad. Returns `out`.
Tensor record(const char* name, Tensor out, const std::vector<Tensor>& inputs, BackwardFn fn);

// Runs the backward pass from `root` seeded with `grad` (same shape as root).
void backward(const Tensor& root, const Tensor& grad);

}  // namespace nexus::autograd
