// Hierarchical gradient reduction (DESIGN decision 6): inside each group over its fast links,
// across groups with a codec of its own (compression where the links between groups are slow).
//
// Sharded (groups of equal size G): a reduce-scatter inside each group leaves each rank with the
// group's sum of one G-th of the buffer; the ranks holding the same G-th in every group (the
// "cross" ring: the ranks at the same position in their groups) all-reduce it; an all-gather
// inside each group spreads the G-ths. Each rank sends 1/G of the buffer across groups, every
// rank's link is used, and the buffer crosses the group's links twice, not three times.
//
// Leaders (groups of different sizes): a ring all-reduce inside each group, a ring among the
// group leaders (the cross ring holds only them), then each leader broadcasts the result inside
// its group.
//
// Either way the cross ring leaves its ranks bit-identical and the group phases copy bytes, so
// every rank ends with the same values.
#pragma once

#include <memory>
#include <vector>

#include "comm/bucket.h"

namespace nexus::comm {

// Sends root's `bytes` at `data` to every other rank of t (in place). Every rank calls it with
// the same bytes and root.
void broadcast(Transport& t, void* data, size_t bytes, int root, Timeout timeout);

class HierarchicalReducer {
 public:
  // group: this rank's group (rank 0 its leader). cross: sharded, this rank's cross ring (one
  // rank per group); leaders, the ring of leaders, null on a rank that is not one (or when there
  // is a single group). params as BucketReducer's.
  HierarchicalReducer(Transport& group, Transport* cross, bool sharded, const std::vector<Tensor>& params,
                      size_t bucket_bytes, std::shared_ptr<const Codec> cross_codec);

  // grads[i] = sum over all ranks of pre_scale * grads[i], in place; `group_buckets` (its codec
  // and residuals) reduces inside the group. Returns the bytes of this rank's stages and the
  // time of all of them; last_cross_bytes() the bytes of the cross stage alone.
  AllReduceStats reduce(BucketReducer& group_buckets, const std::vector<Tensor>& grads, double pre_scale,
                        const AllReduceOptions& opts);
  // One bucket of group_buckets (grads[i]: parameter i's gradient data; only the bucket's are
  // touched), for callers that reduce buckets as backward finishes them. Adds its cross-group
  // bytes to last_cross_bytes(); reset_cross_bytes() starts a step.
  AllReduceStats reduce_bucket(BucketReducer& group_buckets, size_t b, const std::vector<void*>& grads,
                               double pre_scale, const AllReduceOptions& opts);

  bool sharded() const { return sharded_; }
  uint64_t last_cross_bytes() const { return cross_bytes_; }
  void reset_cross_bytes() { cross_bytes_ = 0; }
  // The transports a bucket's reduction uses (the group's, and the cross ring's where this rank
  // is on it).
  std::vector<Transport*> transports() const { return {&group_, cross_}; }

 private:
  Transport& group_;
  Transport* cross_;
  const bool sharded_;
  std::shared_ptr<const Codec> cross_codec_;
  std::unique_ptr<BucketReducer> leader_buckets_;  // leaders: the cross ring's own buckets
  std::vector<Residual> cross_residuals_;          // sharded, lossy cross codec: one per bucket
  uint64_t cross_bytes_ = 0;
};

}  // namespace nexus::comm
