#include "comm/overlap.h"

#include <memory>

#include "base/error.h"

namespace nexus::comm {

OverlapReduction::OverlapReduction(BucketReducer& reducer, Transport& transport, double pre_scale,
                                   AllReduceOptions opts)
    : OverlapReduction(
          reducer, {&transport},
          [&reducer, &transport, pre_scale, opts = std::move(opts)](size_t b, const std::vector<void*>& g) {
            return reducer.reduce_bucket(transport, b, g, pre_scale, 1.0, opts);
          }) {}

OverlapReduction::OverlapReduction(BucketReducer& reducer, std::vector<Transport*> transports, BucketReduction reduce)
    : reducer_(reducer),
      transports_(std::move(transports)),
      reduce_(std::move(reduce)),
      data_(reducer.num_params(), nullptr),
      in_(reducer.buckets().size(), 0),
      bucket_of_(reducer.num_params(), 0) {
  const auto& buckets = reducer_.buckets();
  for (size_t b = 0; b < buckets.size(); ++b)
    for (size_t i = buckets[b].first; i < buckets[b].last; ++i) bucket_of_[i] = b;
  start_ = std::chrono::steady_clock::now();
  worker_ = std::thread([this] { work(); });
}

OverlapReduction::~OverlapReduction() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    abort_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void OverlapReduction::ready(size_t param, void* data) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (data_[param] != nullptr) return;
    data_[param] = data;
    ++in_[bucket_of_[param]];
  }
  cv_.notify_all();
}

AllReduceStats OverlapReduction::finish(const std::vector<Tensor>& grads) {
  NX_CHECK(grads.size() == data_.size(), "OverlapReduction.finish: ", grads.size(), " gradients for ", data_.size(),
           " parameters");
  for (size_t i = 0; i < grads.size(); ++i) {
    NX_CHECK(grads[i].defined() && (grads[i].numel() == 0 || grads[i].is_contiguous()) &&
                 size_t(grads[i].numel()) == reducer_.numel(i) && grads[i].dtype() == reducer_.dtype(),
             "OverlapReduction.finish: gradient ", i, " must be a defined contiguous ", dtype_name(reducer_.dtype()),
             " tensor of ", reducer_.numel(i), " elements");
    ready(i, grads[i].raw_data());
  }
  worker_.join();
  if (error_) std::rethrow_exception(error_);
  stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  return stats_;
}

void OverlapReduction::work() {
  std::vector<std::unique_ptr<BackgroundScope>> background;
  for (Transport* t : transports_)
    if (t) background.push_back(std::make_unique<BackgroundScope>(*t));
  const auto& buckets = reducer_.buckets();
  for (size_t b = buckets.size(); b-- > 0;) {
    std::vector<void*> data;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      const size_t want = buckets[b].last - buckets[b].first;
      cv_.wait(lock, [&] { return abort_ || in_[b] == want; });
      if (abort_) return;
      data = data_;
    }
    try {
      const AllReduceStats s = reduce_(b, data);
      stats_.bytes_sent += s.bytes_sent;
      stats_.bytes_uncompressed += s.bytes_uncompressed;
    } catch (...) {
      error_ = std::current_exception();
      return;
    }
  }
}

}  // namespace nexus::comm
