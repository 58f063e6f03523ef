// Bucket: the gradients of consecutive parameters packed into one flat buffer and reduced by one
// ring all-reduce, then unpacked (PyTorch's GradBucket). Few large rings instead of one per
// parameter: each ring pays 2(N-1) message latencies whatever its size.
//
// BucketReducer plans the buckets once for a list of parameter shapes (in order; a bucket closes
// when the next parameter would take it past bucket_bytes, and a parameter larger than that gets
// a bucket of its own) and keeps, for a lossy codec, one Residual per bucket: the per-parameter
// error-feedback residuals laid end to end, in the same layout every step.
//
// reduce() computes, in place on every rank, grads[i] = post_scale * sum over ranks of
// (pre_scale * grads[i]). Data-parallel training passes pre_scale = (this rank's samples) / B and
// post_scale = B / (samples of all ranks), so the result is the full-batch mean gradient even
// when ranks hold different numbers of samples (DESIGN decision 7).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "comm/ring.h"
#include "tensor/tensor.h"

namespace nexus::comm {

inline constexpr size_t kDefaultBucketBytes = size_t(4) << 20;

struct Bucket {
  size_t first = 0, last = 0;  // parameters [first, last)
  size_t numel = 0;            // elements of all of them
};

class BucketReducer {
 public:
  // params: tensors of the parameters' shapes and dtype (float32 or float64, all the same).
  BucketReducer(const std::vector<Tensor>& params, size_t bucket_bytes, std::shared_ptr<const Codec> codec);

  AllReduceStats reduce(Transport& t, const std::vector<Tensor>& grads, double pre_scale, double post_scale,
                        const AllReduceOptions& base);

  // Reduces bucket b alone; grads[i] points at parameter i's gradient data (only the bucket's
  // parameters are read). For callers that reduce buckets as their gradients become final.
  AllReduceStats reduce_bucket(Transport& t, size_t b, const std::vector<void*>& grads, double pre_scale,
                               double post_scale, const AllReduceOptions& base);

  // reduce_bucket with another reduction of the packed bucket: `reduce` gets the flat buffer
  // (dtype(), bucket.numel elements, pre_scale applied) and the bucket's Residual (null for a
  // lossless codec), and must leave the sum there; post_scale is applied on unpacking.
  using Reduction = std::function<AllReduceStats(void* flat, size_t n, Residual* residual)>;
  AllReduceStats reduce_bucket_with(size_t b, const std::vector<void*>& grads, double pre_scale, double post_scale,
                                    const Reduction& reduce);

  const std::shared_ptr<const Codec>& codec() const { return codec_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  size_t num_params() const { return numels_.size(); }
  size_t numel(size_t param) const { return numels_[param]; }
  DType dtype() const { return dtype_; }
  void reset_residuals();

 private:
  template <class T> AllReduceStats reduce_one(size_t b, const std::vector<void*>& grads, double pre, double post,
                                               const Reduction& reduce);

  std::vector<size_t> numels_;
  DType dtype_;
  std::vector<Bucket> buckets_;
  std::shared_ptr<const Codec> codec_;
  std::vector<Residual> residuals_;  // one per bucket, lossy codecs only
  std::vector<std::byte> flat_;      // the packed bucket
};

}  // namespace nexus::comm
