// OverlapReduction: a BucketReducer's buckets reduced on a worker thread while backward still
// runs. Backward reports each gradient as it becomes final (ready(), from CompiledModel's
// gradient-ready hook); the worker takes the buckets from the last to the first (the order
// backward finishes them), each once all of its gradients are in. Every rank takes them in that
// same fixed order, so the rings match. finish() hands over any gradient not yet reported,
// waits for the worker and returns the bytes and time. The worker tells the transports it runs
// in the background (Transport::set_background) while it works. A bucket is reduced by a ring
// over one transport, or by any per-bucket reduction (the hierarchical one).
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/bucket.h"

namespace nexus::comm {

class OverlapReduction {
 public:
  // Bucket b's reduction: grads[i] points at parameter i's gradient (only b's are read).
  using BucketReduction = std::function<AllReduceStats(size_t b, const std::vector<void*>& grads)>;

  // Gradients are multiplied by pre_scale before they are summed (as BucketReducer::reduce).
  OverlapReduction(BucketReducer& reducer, Transport& transport, double pre_scale, AllReduceOptions opts);
  // Each bucket by `reduce`, which uses `transports` (set to the background while it works).
  OverlapReduction(BucketReducer& reducer, std::vector<Transport*> transports, BucketReduction reduce);
  ~OverlapReduction();  // stops the worker between buckets if finish() was never called
  OverlapReduction(const OverlapReduction&) = delete;
  OverlapReduction& operator=(const OverlapReduction&) = delete;

  // Parameter `param`'s gradient, at `data`, is final. Thread-safe; a second report is ignored.
  void ready(size_t param, void* data);
  AllReduceStats finish(const std::vector<Tensor>& grads);

  size_t num_params() const { return data_.size(); }
  size_t numel(size_t param) const { return reducer_.numel(param); }

 private:
  void work();

  BucketReducer& reducer_;
  std::vector<Transport*> transports_;
  BucketReduction reduce_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<void*> data_;  // per parameter: its gradient's data, once reported
  std::vector<size_t> in_;   // per bucket: gradients reported
  std::vector<size_t> bucket_of_;
  bool abort_ = false;
  AllReduceStats stats_;
  std::exception_ptr error_;
  std::chrono::steady_clock::time_point start_;
  std::thread worker_;
};

}  // namespace nexus::comm
