#include "tensor/tape.h"

#include <unordered_map>

#include "ops/ops.h"

namespace nexus {

// ---- Tensor's autograd accessors ---------------------------------------------------------
static autograd::AutogradMeta& meta(TensorImpl* impl) {
  if (!impl->autograd) impl->autograd = std::make_shared<autograd::AutogradMeta>();
  return *impl->autograd;
}

bool Tensor::requires_grad() const {
  auto& m = impl_->autograd;
  return m && (m->requires_grad || m->grad_fn);
}

void Tensor::set_requires_grad(bool on) {
  NX_CHECK(is_leaf(), "requires_grad can only be changed on leaf tensors (this one was produced by ", grad_fn()->name,
           "); use .detach() first");
  NX_CHECK_TYPE(!on || is_floating(dtype()), "only floating-point tensors can require gradients, got ",
                dtype_name(dtype()));
  meta(impl()).requires_grad = on;
}

Tensor Tensor::grad() const { return impl_->autograd ? impl_->autograd->grad : Tensor(); }

void Tensor::set_grad(const Tensor& g) {
  if (g.defined())
    NX_CHECK(g.shape() == shape(), "grad of shape ", shape_str(g.shape()), " assigned to a tensor of shape ",
             shape_str(shape()));
  meta(impl()).grad = g;
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> none;
  return impl_->autograd ? impl_->autograd->grad_fn : none;
}

bool Tensor::is_leaf() const { return grad_fn() == nullptr; }

Tensor Tensor::detach() const {
  return view_of(impl_->storage, impl_->offset, impl_->shape, impl_->strides, impl_->dtype);
}

namespace autograd {

static thread_local bool tls_grad_enabled = true;
bool grad_enabled() { return tls_grad_enabled; }
void set_grad_enabled(bool on) { tls_grad_enabled = on; }

bool would_record(const std::vector<Tensor>& inputs) {
  if (!tls_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Tensor record(const char* name, Tensor out, const std::vector<Tensor>& inputs, BackwardFn fn) {
  if (!would_record(inputs)) return out;
  auto node = std::make_shared<Node>();
  node->name = name;
  node->backward = std::move(fn);
  for (const Tensor& t : inputs) {
    Edge e;
    if (t.defined() && t.requires_grad()) {
      if (t.grad_fn()) e.node = t.grad_fn();
      else e.leaf = t.impl_ptr();
    }
    node->next.push_back(std::move(e));
  }
  meta(out.impl()).grad_fn = std::move(node);
  return out;
}

// The first gradient of a leaf becomes its .grad: taken as it is when nothing else holds it
// (a fresh result of a backward rule, as PyTorch's AccumulateGrad steals), else copied.
static void accumulate_leaf(TensorImpl* leaf, Tensor g) {
  Tensor self(std::shared_ptr<TensorImpl>(std::shared_ptr<TensorImpl>{}, leaf));
  if (g.dtype() != leaf->dtype) g = ops::astype(g, leaf->dtype);
  Tensor old = self.grad();
  if (old.defined()) return self.set_grad(ops::add(old, g));
  const bool sole =
      g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 && !g.impl()->autograd && g.is_contiguous();
  self.set_grad(sole ? std::move(g) : ops::contiguous(g, /*force_copy=*/true));
}

void backward(const Tensor& root, const Tensor& grad) {
  NX_CHECK(root.requires_grad(),
           "backward: the tensor does not require grad and has no grad_fn; "
           "set requires_grad=True on the inputs you want gradients for");
  NX_CHECK(grad.shape() == root.shape(), "backward: gradient of shape ", shape_str(grad.shape()),
           " does not match the tensor's shape ", shape_str(root.shape()));
  NoGradGuard no_grad;  // backward rules build plain tensors (no higher-order graphs)
  if (!root.grad_fn()) {
    accumulate_leaf(root.impl(), grad);
    return;
  }
  // Count how many edges point at each node, so each runs once all its consumers have.
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack{root.grad_fn().get()};
  deps[root.grad_fn().get()] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next) {
      if (!e.node) continue;
      if (deps[e.node.get()]++ == 0) stack.push_back(e.node.get());
    }
  }
  std::unordered_map<Node*, Tensor> pending{{root.grad_fn().get(), grad}};
  std::vector<Node*> ready{root.grad_fn().get()};
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    Tensor g = std::move(pending[n]);
    pending.erase(n);
    std::vector<bool> needs;
    for (const Edge& e : n->next) needs.push_back(e.active());
    std::vector<Tensor> grads = n->backward(g, needs);
    NX_ASSERT(grads.size() == n->next.size(), n->name, " returned ", grads.size(), " grads");
    for (size_t i = 0; i < grads.size(); ++i) {
      const Edge& e = n->next[i];
      if (!e.active()) continue;
      NX_ASSERT(grads[i].defined(), n->name, ": missing gradient for input ", i);
      if (e.leaf) {
        NX_ASSERT(grads[i].shape() == e.leaf->shape, n->name, ": gradient shape ", shape_str(grads[i].shape()),
                  " != input shape ", shape_str(e.leaf->shape));
        accumulate_leaf(e.leaf.get(), std::move(grads[i]));
        continue;
      }
      Tensor& slot = pending[e.node.get()];
      slot = slot.defined() ? ops::add(slot, grads[i]) : grads[i];
      if (--deps[e.node.get()] == 0) ready.push_back(e.node.get());
    }
  }
}

}  // namespace autograd
}  // namespace nexus
