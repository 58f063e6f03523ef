#include "tensor/tensor.h"

#include "base/checked.h"
#include "device/backend.h"
#include "tensor/allocator.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

namespace nexus {

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d == 0) return 0;  // an empty tensor, however large its other dims
  for (int64_t d : shape)
    if (!checked_mul(n, d, &n)) throw MemoryError(str("shape ", shape_str(shape), " has more than 2^63 elements"));
  return n;
}

size_t checked_bytes(const Shape& shape, int64_t itemsize, const char* what) {
  int64_t bytes = 0;
  if (!checked_mul(numel(shape), itemsize, &bytes) || bytes > PTRDIFF_MAX)
    throw MemoryError(str(what, ": shape ", shape_str(shape), " needs more than 2^63 bytes"));
  return size_t(bytes);
}

Strides contiguous_strides(const Shape& shape) {
  Strides s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    // Only an empty tensor's other dims can multiply past int64 (numel checks the rest): its
    // strides are never walked, so 0 serves.
    if (!checked_mul(acc, std::max<int64_t>(shape[i], 1), &acc)) acc = 0;
  }
  return s;
}

std::string shape_str(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + (shape.size() == 1 ? ",)" : ")");
}

int64_t wrap_axis(int64_t axis, int64_t ndim, const char* op) {
  int64_t n = std::max<int64_t>(ndim, 1);
  NX_CHECK_INDEX(axis >= -n && axis < n, op, ": axis ", axis, " is out of range for a tensor of ", ndim,
                 " dimension(s); valid: [", -n, ", ", n - 1, "]");
  return axis < 0 ? axis + n : axis;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    NX_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
             " cannot be broadcast (dimension ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  auto rank = [](DType t) {
    switch (t) {
      case DType::Bool: return 0;
      case DType::Int32: return 1;
      case DType::Int64: return 2;
      case DType::Float16:
      case DType::BFloat16: return 3;
      case DType::Float32: return 4;
      case DType::Float64: return 5;
    }
    return 0;
  };
  if (rank(a) == 3 && rank(b) == 3) return DType::Float32;  // float16 with bfloat16
  return rank(a) >= rank(b) ? a : b;
}

// ---- Storage ---------------------------------------------------------------------------------
Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  if (!device.is_cpu()) {
    device::Backend& b = device::backend(device);
    data_ = b.allocate(nbytes, device.index);
    deleter_ = [&b, index = device.index](void* p) { b.release(p, index); };
    return;
  }
  alloc::Block b = alloc::allocate(nbytes);
  data_ = b.data;
  deleter_ = [capacity = b.capacity](void* p) { alloc::release({p, capacity}); };
}

Storage::Storage(void* data, size_t nbytes, std::function<void(void*)> deleter, Device device)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

std::shared_ptr<const void> Storage::derived(const std::vector<int64_t>& key,
                                             const std::function<std::shared_ptr<const void>()>& make) {
  std::lock_guard<std::mutex> lock(derived_mu_);
  if (!derived_ || derived_key_ != key) {
    derived_ = make();
    derived_key_ = key;
  }
  return derived_;
}

Storage::~Storage() {
  if (deleter_) deleter_(data_);
}

// ---- Tensor ----------------------------------------------------------------------------------
Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) NX_CHECK(d >= 0, "negative dimension ", d, " in shape ", shape_str(shape));
  const size_t bytes = checked_bytes(shape, itemsize(dtype), "tensor");
  std::shared_ptr<Storage> storage;
  try {
    storage = std::make_shared<Storage>(bytes, device);
  } catch (const std::bad_alloc&) {
    throw MemoryError(
        str("cannot allocate ", bytes, " bytes for a ", dtype_name(dtype), " tensor of shape ", shape_str(shape)));
  }
  return view_of(std::move(storage), 0, shape, contiguous_strides(shape), dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (device.is_cpu()) std::memset(t.raw_data(), 0, size_t(t.numel() * itemsize(dtype)));
  else device::backend(device).fill(t, 0.0);
  return t;
}

Tensor Tensor::view_of(std::shared_ptr<Storage> storage, int64_t offset, Shape shape, Strides strides, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->offset = offset;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

void Tensor::throw_not_on_host() const {
  throw NotImplementedError(str("a ", device().str(), " tensor reached code that reads host memory: this operation ",
                                "has no ", device().str(), " kernel yet; move the tensor with .cpu() first"));
}

void Tensor::rebind(std::shared_ptr<Storage> storage, int64_t offset) const {
  NX_CHECK(is_contiguous(), "rebind: the tensor of shape ", shape_str(shape()), " is not contiguous");
  NX_CHECK(storage && offset >= 0 && size_t(offset + numel()) * itemsize(dtype()) <= storage->nbytes() &&
               storage->device() == device(),
           "rebind: the new storage cannot hold the tensor's ", numel(), " elements from offset ", offset);
  impl_->storage = std::move(storage);
  impl_->offset = offset;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = impl_->shape.size(); i-- > 0;) {
    if (impl_->shape[i] == 1) continue;
    if (impl_->strides[i] != expected) return false;
    expected *= impl_->shape[i];
  }
  return true;
}

}  // namespace nexus
