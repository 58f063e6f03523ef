#include "comm/bucket.h"

#include <algorithm>

#include "base/error.h"

namespace nexus::comm {

BucketReducer::BucketReducer(const std::vector<Tensor>& params, size_t bucket_bytes, std::shared_ptr<const Codec> codec)
    : dtype_(params.empty() ? DType::Float32 : params[0].dtype()),
      codec_(codec ? std::move(codec) : make_none_codec()) {
  NX_CHECK(bucket_bytes > 0, "BucketReducer: bucket_bytes must be > 0");
  NX_CHECK_TYPE(dtype_ == DType::Float32 || dtype_ == DType::Float64,
                "BucketReducer: parameters "
                "are ",
                dtype_name(dtype_), "; valid dtypes: float32, float64");
  NX_CHECK(dtype_ == DType::Float32 || codec_->lossless(), "BucketReducer: codec \"", codec_->spec(),
           "\" compresses float32 gradients; float64 ones take codec \"none\"");
  const size_t item = size_t(itemsize(dtype_));
  for (size_t i = 0; i < params.size(); ++i) {
    NX_CHECK(params[i].defined(), "BucketReducer: parameter ", i, " is undefined");
    NX_CHECK_TYPE(params[i].dtype() == dtype_, "BucketReducer: parameter ", i, " is ", dtype_name(params[i].dtype()),
                  " but parameter 0 is ", dtype_name(dtype_));
    const size_t n = size_t(params[i].numel());
    numels_.push_back(n);
    if (buckets_.empty() || (buckets_.back().numel + n) * item > bucket_bytes)
      if (buckets_.empty() || buckets_.back().numel > 0) buckets_.push_back({i, i, 0});
    buckets_.back().last = i + 1;
    buckets_.back().numel += n;
  }
  if (!codec_->lossless())
    for (const Bucket& b : buckets_) residuals_.emplace_back(b.numel);
}

void BucketReducer::reset_residuals() {
  for (Residual& r : residuals_) r.reset();
}

template <class T> AllReduceStats BucketReducer::reduce_one(size_t b, const std::vector<void*>& grads, double pre,
                                                            double post, const Reduction& reduce) {
  const Bucket& bk = buckets_[b];
  flat_.resize(std::max(flat_.size(), bk.numel * sizeof(T)));
  T* flat = reinterpret_cast<T*>(flat_.data());
  size_t off = 0;
  for (size_t i = bk.first; i < bk.last; ++i) {
    const T* g = static_cast<const T*>(grads[i]);
    for (size_t k = 0; k < numels_[i]; ++k) flat[off + k] = T(g[k] * pre);
    off += numels_[i];
  }
  const AllReduceStats s = reduce(flat, bk.numel, residuals_.empty() ? nullptr : &residuals_[b]);
  off = 0;
  for (size_t i = bk.first; i < bk.last; ++i) {
    T* g = static_cast<T*>(grads[i]);
    for (size_t k = 0; k < numels_[i]; ++k) g[k] = T(flat[off + k] * post);
    off += numels_[i];
  }
  return s;
}

AllReduceStats BucketReducer::reduce_bucket_with(size_t b, const std::vector<void*>& grads, double pre_scale,
                                                 double post_scale, const Reduction& reduce) {
  NX_CHECK(b < buckets_.size(), "BucketReducer: bucket ", b, " of ", buckets_.size());
  NX_CHECK(grads.size() == numels_.size(), "BucketReducer: ", grads.size(), " gradients for ", numels_.size(),
           " parameters");
  return dtype_ == DType::Float64 ? reduce_one<double>(b, grads, pre_scale, post_scale, reduce)
                                  : reduce_one<float>(b, grads, pre_scale, post_scale, reduce);
}

AllReduceStats BucketReducer::reduce_bucket(Transport& t, size_t b, const std::vector<void*>& grads, double pre_scale,
                                            double post_scale, const AllReduceOptions& base) {
  return reduce_bucket_with(b, grads, pre_scale, post_scale, [&](void* flat, size_t n, Residual* residual) {
    AllReduceOptions opts = base;
    opts.codec = codec_;
    opts.residual = residual;
    return ring_allreduce(t, flat, dtype_, n, opts);
  });
}

AllReduceStats BucketReducer::reduce(Transport& t, const std::vector<Tensor>& grads, double pre_scale,
                                     double post_scale, const AllReduceOptions& base) {
  const auto start = std::chrono::steady_clock::now();
  NX_CHECK(grads.size() == numels_.size(), "BucketReducer: ", grads.size(), " gradients for ", numels_.size(),
           " parameters");
  for (size_t i = 0; i < grads.size(); ++i) {
    NX_CHECK(grads[i].defined() && (numels_[i] == 0 || grads[i].is_contiguous()), "BucketReducer: gradient ", i,
             " must be a defined contiguous tensor");
    NX_CHECK_TYPE(grads[i].dtype() == dtype_, "BucketReducer: gradient ", i, " is ", dtype_name(grads[i].dtype()),
                  ", expected ", dtype_name(dtype_));
    NX_CHECK(size_t(grads[i].numel()) == numels_[i], "BucketReducer: gradient ", i, " has ", grads[i].numel(),
             " elements, its parameter ", numels_[i]);
  }
  std::vector<void*> data;
  for (const Tensor& g : grads) data.push_back(g.raw_data());
  AllReduceStats s;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const AllReduceStats one = reduce_bucket(t, b, data, pre_scale, post_scale, base);
    s.bytes_sent += one.bytes_sent;
    s.bytes_uncompressed += one.bytes_uncompressed;
  }
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return s;
}

}  // namespace nexus::comm
