#include "comm/data_parallel.h"

#include "base/error.h"

namespace nexus::comm {

namespace {

template <class T> void scale(const Tensor& g, double factor) {
  T* p = g.data<T>();
  const T f = T(factor);
  for (int64_t k = 0; k < g.numel(); ++k) p[k] *= f;
}

}  // namespace

DataParallelReducer::DataParallelReducer(Transport& world, const std::vector<Tensor>& params, DataParallelOptions opts,
                                         Transport* group, Transport* cross)
    : world_(world),
      opts_(std::move(opts)),
      buckets_(params, opts_.bucket_bytes, opts_.codec),
      overlap_(opts_.overlap),
      busy_(size_t(world.size()), 0.0) {
  NX_CHECK(group || !cross, "DataParallelReducer: a cross-group ring needs the group's transport");
  if (group)
    hier_ = std::make_unique<HierarchicalReducer>(*group, cross, opts_.sharded, params, opts_.bucket_bytes,
                                                  opts_.leader_codec);
}

AllReduceOptions DataParallelReducer::ring_options() const {
  AllReduceOptions o;  // sums; BucketReducer sets its own codec and residuals
  o.segment_bytes = opts_.segment_bytes;
  o.timeout = opts_.timeout;
  return o;
}

void DataParallelReducer::sum_counts(std::vector<double>& counts) {
  // Where a step waits for the slowest rank: sleep between polls, so that a rank sharing this
  // core (an oversubscribed node) gets it meanwhile.
  BackgroundScope background(world_);
  ring_allreduce(world_, counts.data(), counts.size(), ring_options());
}

void DataParallelReducer::begin(int64_t samples) {
  NX_CHECK(samples >= 0, "DataParallel: a step of ", samples, " samples");
  start_ = Clock::now();
  samples_ = samples;
  pending_.reset();  // a step that failed before finish() left its worker: stop it
  if (!overlap_) return;
  if (!guess_) {  // the first step: every rank must weight by the same count
    std::vector<double> first{double(samples)};
    sum_counts(first);
    guess_ = first[0] > 0 ? first[0] : 1.0;
  }
  const double pre = double(samples) / *guess_;
  if (!hier_) {
    pending_ = std::make_unique<OverlapReduction>(buckets_, world_, pre, ring_options());
    return;
  }
  hier_->reset_cross_bytes();
  pending_ = std::make_unique<OverlapReduction>(
      buckets_, hier_->transports(), [this, pre, opts = ring_options()](size_t b, const std::vector<void*>& grads) {
        return hier_->reduce_bucket(buckets_, b, grads, pre, opts);
      });
}

void DataParallelReducer::on_grad_ready(size_t param, const Tensor& grad) {
  if (pending_ && param < buckets_.num_params() && size_t(grad.numel()) == buckets_.numel(param))
    pending_->ready(param, grad.raw_data());
}

double DataParallelReducer::finish(const std::vector<Tensor>& grads, double loss) {
  const double busy = std::chrono::duration<double>(Clock::now() - synced_.value_or(start_)).count();
  if (pending_) {
    stats_ = pending_->finish(grads);  // the buckets backward did not already hand over
    pending_.reset();
  }
  std::vector<double> counts(2 + busy_.size(), 0.0);
  counts[0] = double(samples_);
  counts[1] = double(samples_) * loss;
  counts[2 + size_t(world_.rank())] = busy;
  sum_counts(counts);
  const double total = counts[0];
  busy_.assign(counts.begin() + 2, counts.end());
  NX_CHECK(total > 0, "DataParallel.train_step: no rank has any samples in this step");
  const double share = double(samples_) / total;
  if (overlap_) {
    if (total != *guess_)  // weighted by samples / guess: make it samples / total
      for (const Tensor& g : grads)
        buckets_.dtype() == DType::Float64 ? scale<double>(g, *guess_ / total) : scale<float>(g, *guess_ / total);
    guess_ = total;
  } else if (hier_) {
    stats_ = hier_->reduce(buckets_, grads, share, ring_options());
  } else {
    stats_ = buckets_.reduce(world_, grads, share, 1.0, ring_options());
  }
  synced_ = Clock::now();
  last_samples_ = int64_t(total);
  return counts[1] / total;
}

}  // namespace nexus::comm
