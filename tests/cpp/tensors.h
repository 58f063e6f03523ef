// Building a tensor from values and reading its elements back, for the C++ tests: no kernel
// involved either way.
#pragma once

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace nexus::test {

// A contiguous tensor of `shape` holding v.
template <class T> Tensor tensor(const Shape& shape, const std::vector<T>& v) {
  Tensor t = Tensor::empty(shape, DTypeOf<T>::value);
  if (int64_t(v.size()) != t.numel())
    throw std::logic_error("tensor(): " + std::to_string(v.size()) + " values for a shape of another size");
  std::copy(v.begin(), v.end(), t.data<T>());
  return t;
}

// t's elements in row-major order, read through its strides (no kernel involved).
template <class T> std::vector<T> elements(const Tensor& t) {
  std::vector<T> out(size_t(t.numel()));
  const T* base = static_cast<const T*>(t.storage()->data()) + t.offset();
  std::vector<int64_t> idx(size_t(t.ndim()), 0);
  for (size_t k = 0; k < out.size(); ++k) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
    out[k] = base[off];
    for (size_t d = idx.size(); d-- > 0 && ++idx[d] == t.shape()[d];) idx[d] = 0;
  }
  return out;
}

}  // namespace nexus::test
