#include "comm/hierarchical.h"

#include <chrono>
#include <vector>

#include "base/error.h"

namespace nexus::comm {

namespace {

constexpr int kTagBroadcast = 0x4e03;

void add(AllReduceStats& total, const AllReduceStats& s) {
  total.bytes_sent += s.bytes_sent;
  total.bytes_uncompressed += s.bytes_uncompressed;
}

}  // namespace

void broadcast(Transport& t, void* data, size_t bytes, int root, Timeout timeout) {
  const int n = t.size(), me = t.rank();
  NX_CHECK(root >= 0 && root < n, "broadcast: root ", root, " is not a rank of 0..", n - 1);
  if (n == 1) return;
  // Groups are a few ranks: the root sends to each of them directly.
  std::vector<Request> reqs;
  if (me == root) {
    for (int r = 0; r < n; ++r)
      if (r != root) reqs.push_back(t.isend(r, data, bytes, kTagBroadcast));
  } else {
    reqs.push_back(t.irecv(root, data, bytes, kTagBroadcast));
  }
  try {
    for (Request& q : reqs) {
      const size_t got = t.wait(q, timeout);
      if (me != root && got != bytes)
        throw CommError(str("rank ", me, " (this rank) received ", got, " bytes from rank ", root, ", expected ", bytes,
                            ": the ranks disagree on the buffer"));
    }
  } catch (const CommError& e) {
    for (Request& q : reqs) t.cancel(q);
    throw CommError(str("broadcast from rank ", root, ": ", e.what()));
  }
}

HierarchicalReducer::HierarchicalReducer(Transport& group, Transport* cross, bool sharded,
                                         const std::vector<Tensor>& params, size_t bucket_bytes,
                                         std::shared_ptr<const Codec> cross_codec)
    : group_(group),
      cross_(cross),
      sharded_(sharded),
      cross_codec_(cross_codec ? std::move(cross_codec) : make_none_codec()) {
  NX_CHECK(sharded || !cross || group.rank() == 0, "hierarchical reduction: rank ", group.rank(),
           " of its group is on the leaders' ring; the leader must be the group's rank 0");
  if (!sharded && cross_) leader_buckets_ = std::make_unique<BucketReducer>(params, bucket_bytes, cross_codec_);
}

AllReduceStats HierarchicalReducer::reduce(BucketReducer& group_buckets, const std::vector<Tensor>& grads,
                                           double pre_scale, const AllReduceOptions& opts) {
  const auto start = std::chrono::steady_clock::now();
  NX_CHECK(group_buckets.num_params() == grads.size(), "hierarchical reduction: ", grads.size(), " gradients for ",
           group_buckets.num_params(), " parameters");
  std::vector<void*> data;
  for (const Tensor& g : grads) data.push_back(g.raw_data());
  reset_cross_bytes();
  AllReduceStats stats;
  for (size_t b = 0; b < group_buckets.buckets().size(); ++b)
    add(stats, reduce_bucket(group_buckets, b, data, pre_scale, opts));
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

AllReduceStats HierarchicalReducer::reduce_bucket(BucketReducer& group_buckets, size_t b,
                                                  const std::vector<void*>& grads, double pre_scale,
                                                  const AllReduceOptions& opts) {
  AllReduceStats stats;
  if (!sharded_) {  // through leaders: ring in the group, ring of leaders, broadcast in the group
    if (group_.size() > 1) {
      add(stats, group_buckets.reduce_bucket(group_, b, grads, pre_scale, 1.0, opts));
      pre_scale = 1.0;
    }
    if (leader_buckets_) {
      const AllReduceStats across = leader_buckets_->reduce_bucket(*cross_, b, grads, pre_scale, 1.0, opts);
      cross_bytes_ += across.bytes_sent;
      add(stats, across);
    }
    if (group_.size() > 1) {
      const size_t item = size_t(itemsize(group_buckets.dtype()));
      const Bucket& bk = group_buckets.buckets()[b];
      for (size_t i = bk.first; i < bk.last; ++i) {
        const size_t bytes = group_buckets.numel(i) * item;
        broadcast(group_, grads[i], bytes, 0, opts.timeout);
        if (group_.rank() == 0) stats.bytes_sent += bytes * size_t(group_.size() - 1);
      }
    }
    return stats;
  }
  // sharded: reduce-scatter in the group, each shard across groups, all-gather in the group
  if (!cross_codec_->lossless() && cross_residuals_.empty())
    for (const Bucket& bk : group_buckets.buckets())
      cross_residuals_.emplace_back(ring_owned_chunk(bk.numel, group_.size(), group_.rank()).len);
  const DType dtype = group_buckets.dtype();
  const size_t item = size_t(itemsize(dtype));
  return group_buckets.reduce_bucket_with(b, grads, pre_scale, 1.0, [&](void* flat, size_t n, Residual* res) {
    AllReduceOptions in_group = opts;
    in_group.codec = group_buckets.codec();
    in_group.residual = res;
    AllReduceStats s = ring_reduce_scatter(group_, flat, dtype, n, in_group);
    if (cross_) {
      const RingChunk mine = ring_owned_chunk(n, group_.size(), group_.rank());
      AllReduceOptions across = opts;
      across.codec = cross_codec_;
      across.residual = cross_residuals_.empty() ? nullptr : &cross_residuals_[b];
      const AllReduceStats x =
          ring_allreduce(*cross_, static_cast<std::byte*>(flat) + mine.off * item, dtype, mine.len, across);
      cross_bytes_ += x.bytes_sent;
      add(s, x);
    }
    add(s, ring_all_gather(group_, flat, dtype, n, in_group));
    return s;
  });
}

}  // namespace nexus::comm
