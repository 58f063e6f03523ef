// Storage and Tensor. A Tensor is a cheap handle (shared_ptr) to a TensorImpl: a view of a Storage
// with a dtype, shape, strides (in elements) and offset, plus autograd metadata. Tensors are
// immutable to users; ops return new tensors (views share storage).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/shape.h"

namespace nexus {

namespace autograd {
struct Node;
struct AutogradMeta;
}  // namespace autograd

class Storage {
 public:
  // Owned: 64-byte aligned on the host, from the device's backend elsewhere.
  explicit Storage(size_t nbytes, Device device = Device::cpu());
  // Borrowed: `deleter` frees it (host memory unless `device` says otherwise).
  Storage(void* data, size_t nbytes, std::function<void(void*)> deleter, Device device = Device::cpu());
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  // A constant storage's contents never change after it is marked (an inference model's weights,
  // which nothing else holds). Kernels may then keep one form derived from it (weights packed for
  // their inner loop) beside it, made once instead of on every call.
  void mark_constant() { constant_.store(true, std::memory_order_release); }
  bool constant() const { return constant_.load(std::memory_order_acquire); }
  // A shared storage's memory is also written by other processes (comm::SharedStep's segment,
  // which holds an optimizer's moments during data-parallel training). An update outside that
  // step must not write it: ops::optim::step copies such buffers first.
  void mark_shared() { shared_.store(true, std::memory_order_release); }
  bool shared() const { return shared_.load(std::memory_order_acquire); }
  // The derived form `key` names exactly (what form, and of which part: offset, sizes, strides):
  // made by `make` on first use, or again when a different key asks (one form is kept at a time).
  // Safe from several threads at once.
  std::shared_ptr<const void> derived(const std::vector<int64_t>& key,
                                      const std::function<std::shared_ptr<const void>()>& make);

 private:
  void* data_;
  size_t nbytes_;
  Device device_;
  std::function<void(void*)> deleter_;
  std::atomic<bool> constant_{false}, shared_{false};
  std::mutex derived_mu_;
  std::vector<int64_t> derived_key_;
  std::shared_ptr<const void> derived_;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // elements
  Shape shape;
  Strides strides;
  DType dtype = DType::Float32;
  std::shared_ptr<autograd::AutogradMeta> autograd;  // null when no grad was ever involved
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
  // A view of existing storage.
  static Tensor view_of(std::shared_ptr<Storage> storage, int64_t offset, Shape shape, Strides strides, DType dtype);

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

  DType dtype() const { return impl_->dtype; }
  const Shape& shape() const { return impl_->shape; }
  const Strides& strides() const { return impl_->strides; }
  int64_t ndim() const { return int64_t(impl_->shape.size()); }
  int64_t numel() const { return nexus::numel(impl_->shape); }
  int64_t dim(int64_t i) const { return impl_->shape[size_t(i)]; }
  int64_t offset() const { return impl_->offset; }
  const std::shared_ptr<Storage>& storage() const { return impl_->storage; }
  // A tensor without storage (the metadata a derivative rule keeps) says the host.
  Device device() const { return impl_->storage ? impl_->storage->device() : Device::cpu(); }
  bool is_contiguous() const;

  // Moves this contiguous tensor to `storage` from element `offset` (the caller copies the
  // values), for every handle of it at once: a parameter's memory may change while the model,
  // its optimizer and Python all hold it (comm::SharedStep keeps data-parallel parameters in a
  // segment the ranks share). Views made before keep the old storage and no longer alias it;
  // numpy arrays, DLPack capsules and buffers hold the storage they were made from, so none is
  // left pointing at freed memory. Not while another thread uses the tensor.
  void rebind(std::shared_ptr<Storage> storage, int64_t offset) const;

  // The first element's address, on the tensor's device (a device pointer for a CUDA tensor).
  void* raw_data() const { return static_cast<char*>(impl_->storage->data()) + impl_->offset * itemsize(impl_->dtype); }
  // The first element for host code: NotImplementedError for a tensor on a device, whose memory
  // the host cannot read (an op without a device kernel reaching a host loop fails here, not
  // with a segmentation fault).
  template <class T> T* data() const {
    if (!device().is_cpu()) [[unlikely]]
      throw_not_on_host();
    return static_cast<T*>(raw_data());
  }

  // autograd (defined in autograd/engine.cpp)
  bool requires_grad() const;
  void set_requires_grad(bool on);
  Tensor grad() const;
  void set_grad(const Tensor& g);
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  bool is_leaf() const;
  Tensor detach() const;  // same storage, no autograd

 private:
  [[noreturn]] void throw_not_on_host() const;
  std::shared_ptr<TensorImpl> impl_;
};

}  // namespace nexus
