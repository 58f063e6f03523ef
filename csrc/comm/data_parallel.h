// DataParallelReducer: the gradient side of a data-parallel training step (DESIGN decisions 6
// and 7), the engine::GradReducer CompiledModel::train_step calls, over Transports.
//
// Sample weighting: every rank's gradient is weighted by its share of the step's samples, so the
// reduced gradient is the full-batch mean gradient even when ranks hold different numbers of
// rows; a rank with no rows contributes zeros. Each step the ranks sum [samples, samples x loss,
// busy seconds of each rank] (exact, tiny), so every rank reports the global batch's mean loss.
//
// Flat reduction: the gradients go through the BucketReducer's buckets, one ring each. With
// overlap, an OverlapReduction reduces each bucket on a worker thread as soon as backward has
// finished all of its gradients; those are weighted by this rank's samples over the previous
// step's global count (the same on every rank and known before backward starts; the first step
// exchanges the counts first) and rescaled once this step's count is in, if it changed.
// Hierarchical reduction (a group and a cross-group Transport): see HierarchicalReducer; with
// overlap its buckets go to the worker thread the same way.
//
// On devices (opts.device): when every rank's model is on a device whose backend has a collective
// library (NCCL for CUDA) and none declines (opts.device_collective, NEXUS_NCCL), the gradients
// are summed there, weighted by samples, after backward (device::Collective), with no host copy
// and no ring (flat reduction without a codec, every rank on a device of its own). Otherwise a device rank's gradients are copied to the host for the ring.
//
// Shared memory (opts.shared_memory, flat reduction without a codec): when every rank is on one
// machine, SharedStep replaces the ring and shards the optimizer update, from the first step whose
// optimizer state allows it (SharedStep::can_shard); the counts go through the segment too.
//
// Busy seconds: the time from the previous step's reduction (the last moment the ranks were
// together) to the end of this step's backward, so it holds the update, the caller's loop, the
// data, forward and backward, and, on a rank that shares its core, the time the core spent on
// the other rank; not the wait for the others. Every rank gets every rank's, and the process
// CPU seconds over the same span (on a shared core, busy minus CPU is the time the other rank
// had the core: how the scheduler tells a slow rank from a crowded one).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "comm/bucket.h"
#include "comm/hierarchical.h"
#include "comm/overlap.h"
#include "comm/shared_step.h"
#include "device/backend.h"
#include "engine/grad_reducer.h"

namespace nexus::comm {

struct DataParallelOptions {
  size_t bucket_bytes = kDefaultBucketBytes;
  std::shared_ptr<const Codec> codec;         // the world's (or the groups') ring; null: "none"
  std::shared_ptr<const Codec> leader_codec;  // the cross-group ring (hierarchical); null: "none"
  bool sharded = false;                       // hierarchical: sharded (equal groups) or through leaders
  bool overlap = true;                        // reduce while backward runs (flat reduction; the worker thread and this
                                              // one must be allowed to use the transport in turn)
  size_t segment_bytes = kMaxSegmentBytes;
  Timeout timeout = default_timeout();
  bool shared_memory = true;      // ranks on one machine: SharedStep (flat reduction, codec "none")
  Device device;                  // where the model's parameters and gradients are
  bool device_collective = true;  // a flat reduction of device ranks through their library (NCCL)
};

class DataParallelReducer final : public engine::GradReducer {
 public:
  // world: all ranks. params: the model's parameters (shapes and dtype of the gradients).
  // group and cross (hierarchical): this rank's group, whose rank 0 is its leader, and the
  // cross-group ring of HierarchicalReducer (opts.sharded says which kind).
  DataParallelReducer(Transport& world, const std::vector<Tensor>& params, DataParallelOptions opts,
                      Transport* group = nullptr, Transport* cross = nullptr);

  void begin(int64_t samples) override;
  void on_grad_ready(size_t param, const Tensor& grad) override;
  double finish(const std::vector<Tensor>& grads, double loss) override;
  bool takes_update(const ops::optim::Config& c, const ops::optim::State& s) override;
  void update(const ops::optim::Config& c, double lr, const std::vector<Tensor>& params, ops::optim::State& s) override;

  bool reduces_on_device() const override { return collective_ != nullptr; }
  // Whether the ranks share a segment (the step goes through SharedStep once the optimizer allows).
  bool shared_memory() const { return shared_ != nullptr; }
  // Whether the last step did (its update was sharded).
  bool last_step_shared() const { return last_shared_; }
  size_t num_buckets() const { return buckets_.buckets().size(); }
  // Of the last step: the samples of all ranks, every rank's busy seconds, this rank's bytes
  // and seconds of the gradient reduction.
  int64_t last_samples() const { return last_samples_; }
  const std::vector<double>& busy_seconds() const { return busy_; }
  const std::vector<double>& cpu_seconds() const { return cpu_; }
  const AllReduceStats& last_stats() const { return stats_; }
  // This rank's seconds in the last step: forward and backward (begin to finish), the gradient
  // reduction's tail after backward (the buckets it had not finished, and waiting for slower
  // ranks), and the exchange of the step's counts.
  struct Phases {
    double backward = 0, reduction = 0, counts = 0;
  };
  const Phases& last_phases() const { return phases_; }

 private:
  AllReduceOptions ring_options() const;
  // Every rank says whether it can reduce on its device; when all can, the communicator is made.
  void open_collective(bool plain);
  void sum_counts(std::vector<double>& counts);  // over the world, in place

  using Clock = std::chrono::steady_clock;
  Transport& world_;
  DataParallelOptions opts_;
  BucketReducer buckets_;
  std::unique_ptr<HierarchicalReducer> hier_;
  std::unique_ptr<device::Collective> collective_;  // null: host buffers and the ring
  bool overlap_;
  std::unique_ptr<OverlapReduction> pending_;  // this step's, with overlap
  std::unique_ptr<SharedStep> shared_;         // null: the ranks reduce through the ring
  bool shard_ = false, last_shared_ = false;   // this step (and the last) through shared_
  std::vector<bool> copied_;                   // gradients already in this rank's slot, this step
  std::vector<double> weights_;                // each rank's share of this step's samples
  Clock::time_point entered_;                  // when finish() began
  std::optional<double> guess_;                // the previous step's global sample count
  std::optional<Clock::time_point> synced_;    // when the last reduction ended
  Clock::time_point start_;
  double synced_cpu_ = -1, start_cpu_ = 0;  // the process's CPU seconds then (-1: no step yet)
  int64_t samples_ = 0;                     // this rank's, this step
  int64_t last_samples_ = 0;
  std::vector<double> busy_, cpu_;
  AllReduceStats stats_;
  Phases phases_;
};

}  // namespace nexus::comm
