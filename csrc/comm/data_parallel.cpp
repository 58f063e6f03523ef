#include "comm/data_parallel.h"

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <ctime>
#include <functional>

#include "base/env.h"
#include "base/error.h"
#include "ops/optim.h"

namespace nexus::comm {

namespace {

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

}  // namespace

DataParallelReducer::DataParallelReducer(Transport& world, const std::vector<Tensor>& params, DataParallelOptions opts,
                                         Transport* group, Transport* cross)
    : world_(world),
      opts_(std::move(opts)),
      buckets_(params, opts_.bucket_bytes, opts_.codec),
      overlap_(opts_.overlap),
      busy_(size_t(world.size()), 0.0),
      cpu_(size_t(world.size()), 0.0) {
  NX_CHECK(group || !cross, "DataParallelReducer: a cross-group ring needs the group's transport");
  if (group)
    hier_ = std::make_unique<HierarchicalReducer>(*group, cross, opts_.sharded, params, opts_.bucket_bytes,
                                                  opts_.leader_codec);
  const bool plain = !opts_.codec || opts_.codec->spec() == "none";
  // Every rank takes part in the handshakes (its wish is its answer), so ranks that disagree
  // fall back to the ring together instead of waiting for each other.
  if (!group) open_collective(plain);
  if (collective_) overlap_ = false;  // the device sums after backward, on its stream
  // A rank whose model is on a device declines the segment (its gradients and update are there):
  // beside host ranks, all of them keep the ring together.
  if (!group && plain && !collective_)
    shared_ = SharedStep::open(world_, params,
                               opts_.shared_memory && opts_.device.is_cpu() && knob_bool("NEXUS_DP_SHARED_MEMORY"),
                               opts_.timeout);
}

void DataParallelReducer::open_collective(bool plain) {
  bool can = plain && !opts_.device.is_cpu() && opts_.device_collective && knob_bool("NEXUS_NCCL");
  if (can) can = device::backend(opts_.device).collective_unavailable().empty();
  // [ranks that can, then each rank's device (machine and device id, hashed to 52 bits)]: two
  // ranks on one GPU (NCCL refuses them) keep the ring.
  const size_t n = size_t(world_.size());
  std::vector<double> votes(1 + n, 0.0);
  votes[0] = can ? 1.0 : 0.0;
  if (can) {
    char host[256] = {};
    (void)gethostname(host, sizeof host - 1);
    const std::string uid = str(host, "/", device::backend(opts_.device).device_uid(opts_.device.index));
    votes[1 + size_t(world_.rank())] = double(std::hash<std::string>()(uid) >> 12) + 1.0;
  }
  sum_counts(votes);
  if (votes[0] != double(n)) return;
  std::vector<double> devices(votes.begin() + 1, votes.end());
  std::sort(devices.begin(), devices.end());
  if (std::adjacent_find(devices.begin(), devices.end()) != devices.end()) return;
  device::Backend& be = device::backend(opts_.device);
  std::string id = world_.rank() == 0 ? be.collective_id() : std::string();
  uint64_t bytes = id.size();
  broadcast(world_, &bytes, sizeof bytes, 0, opts_.timeout);
  id.resize(size_t(bytes));
  broadcast(world_, id.data(), id.size(), 0, opts_.timeout);
  collective_ = be.make_collective(id, world_.size(), world_.rank(), opts_.device.index);
}

bool DataParallelReducer::takes_update(const ops::optim::Config& c, const ops::optim::State& s) {
  shard_ = shared_ && SharedStep::can_shard(c, s, buckets_.num_params());
  return shard_;
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
  start_cpu_ = process_cpu_seconds();
  samples_ = samples;
  pending_.reset();  // a step that failed before finish() left its worker: stop it
  if (shard_) {
    copied_.assign(buckets_.num_params(), false);
    return;
  }
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
  if (shard_) {  // into the segment while it is still in this core's cache
    if (param < copied_.size() && size_t(grad.numel()) == buckets_.numel(param) && grad.dtype() == buckets_.dtype() &&
        grad.is_contiguous()) {
      shared_->copy_in(param, grad);
      copied_[param] = true;
    }
    return;
  }
  if (pending_ && param < buckets_.num_params() && size_t(grad.numel()) == buckets_.numel(param))
    pending_->ready(param, grad.raw_data());
}

double DataParallelReducer::finish(const std::vector<Tensor>& grads, double loss) {
  const auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  // Device work is queued, not done, when backward returns: wait for it, so that busy seconds
  // hold this rank's real compute time.
  if (collective_) device::backend(opts_.device).synchronize(opts_.device.index);
  const Clock::time_point entered = Clock::now();
  const double busy = seconds(synced_.value_or(start_), entered);
  const double cpu = process_cpu_seconds() - (synced_cpu_ >= 0 ? synced_cpu_ : start_cpu_);
  phases_.backward = seconds(start_, entered);
  last_shared_ = shard_;
  if (shard_) {
    entered_ = entered;
    for (size_t i = 0; i < grads.size(); ++i)
      if (!copied_[i]) shared_->copy_in(i, grads[i]);
    const auto records = shared_->exchange({double(samples_), double(samples_) * loss, busy, cpu});
    phases_.counts = seconds(entered, Clock::now());
    double total = 0, loss_sum = 0;
    for (size_t r = 0; r < records.size(); ++r) {
      total += records[r].samples;
      loss_sum += records[r].loss_sum;
      busy_[r] = records[r].busy;
      cpu_[r] = records[r].cpu;
    }
    NX_CHECK(total > 0, "DataParallel.train_step: no rank has any samples in this step");
    weights_.clear();
    for (const auto& r : records) weights_.push_back(r.samples / total);
    stats_ = {};  // nothing on a wire; what the ring would have sent, for the ratio
    size_t n = 0;
    for (size_t i = 0; i < buckets_.num_params(); ++i) n += buckets_.numel(i);
    const size_t w = busy_.size();
    stats_.bytes_uncompressed = uint64_t(2 * (w - 1) * n * itemsize(buckets_.dtype()) / w);
    last_samples_ = int64_t(total);
    return loss_sum / total;
  }
  if (pending_) {
    stats_ = pending_->finish(grads);  // the buckets backward did not already hand over
    pending_.reset();
  }
  const size_t n = busy_.size(), me = size_t(world_.rank());
  std::vector<double> counts(2 + 2 * n, 0.0);  // samples, samples x loss, busy per rank, CPU per rank
  counts[0] = double(samples_);
  counts[1] = double(samples_) * loss;
  counts[2 + me] = busy;
  counts[2 + n + me] = cpu;
  const Clock::time_point counting = Clock::now();
  sum_counts(counts);
  const Clock::time_point counted = Clock::now();
  const double total = counts[0];
  busy_.assign(counts.begin() + 2, counts.begin() + 2 + std::ptrdiff_t(n));
  cpu_.assign(counts.begin() + 2 + std::ptrdiff_t(n), counts.end());
  NX_CHECK(total > 0, "DataParallel.train_step: no rank has any samples in this step");
  const double share = double(samples_) / total;
  if (overlap_) {
    if (total != *guess_)  // weighted by samples / guess: make it samples / total
      ops::optim::scale_(grads, *guess_ / total);
    guess_ = total;
  } else if (collective_) {
    stats_ = {};  // on the device's links, not a wire of ours
    collective_->weighted_sum(grads, share);
  } else if (hier_) {
    stats_ = hier_->reduce(buckets_, grads, share, ring_options());
  } else {
    stats_ = buckets_.reduce(world_, grads, share, 1.0, ring_options());
  }
  synced_ = Clock::now();
  synced_cpu_ = process_cpu_seconds();
  phases_.counts = seconds(counting, counted);
  phases_.reduction = seconds(entered, *synced_) - phases_.counts;
  last_samples_ = int64_t(total);
  return counts[1] / total;
}

void DataParallelReducer::update(const ops::optim::Config& c, double lr, const std::vector<Tensor>& params,
                                 ops::optim::State& s) {
  NX_ASSERT(shard_);
  shared_->update(c, lr, params, weights_, s);
  synced_ = Clock::now();
  synced_cpu_ = process_cpu_seconds();
  phases_.reduction = std::chrono::duration<double>(*synced_ - entered_).count() - phases_.counts;
  stats_.seconds = phases_.reduction;
}

}  // namespace nexus::comm
