// Hierarchical gradient reduction (DESIGN decision 6): a ring inside each group of ranks, then a
// ring among the group leaders with its own codec (compression where the link between groups is
// slow), then each leader broadcasts the result inside its group. Every rank of a group ends with
// its leader's bytes, and the leaders' ring leaves all leaders bit-identical, so all ranks agree.
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
  // group: this rank's group, rank 0 its leader. leaders: the ring of leaders, null on a rank
  // that is not one (or when there is a single group). params as BucketReducer's.
  HierarchicalReducer(Transport& group, Transport* leaders, const std::vector<Tensor>& params, size_t bucket_bytes,
                      std::shared_ptr<const Codec> leader_codec);

  // grads[i] = sum over all ranks of pre_scale * grads[i], in place; `group_buckets` reduces
  // inside the group. Returns the bytes of this rank's stages and the time of all of them.
  AllReduceStats reduce(BucketReducer& group_buckets, const std::vector<Tensor>& grads, double pre_scale,
                        const AllReduceOptions& opts);

 private:
  Transport& group_;
  Transport* leaders_;
  std::unique_ptr<BucketReducer> leader_buckets_;
};

}  // namespace nexus::comm
