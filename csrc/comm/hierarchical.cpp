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

HierarchicalReducer::HierarchicalReducer(Transport& group, Transport* leaders, const std::vector<Tensor>& params,
                                         size_t bucket_bytes, std::shared_ptr<const Codec> leader_codec)
    : group_(group), leaders_(leaders) {
  NX_CHECK(!leaders || group.rank() == 0, "hierarchical reduction: rank ", group.rank(),
           " of its group is on the leaders' ring; the leader must be the group's rank 0");
  if (leaders_) leader_buckets_ = std::make_unique<BucketReducer>(params, bucket_bytes, std::move(leader_codec));
}

AllReduceStats HierarchicalReducer::reduce(BucketReducer& group_buckets, const std::vector<Tensor>& grads,
                                           double pre_scale, const AllReduceOptions& opts) {
  const auto start = std::chrono::steady_clock::now();
  AllReduceStats stats;
  if (group_.size() > 1) {
    add(stats, group_buckets.reduce(group_, grads, pre_scale, 1.0, opts));
    pre_scale = 1.0;
  }
  if (leaders_) add(stats, leader_buckets_->reduce(*leaders_, grads, pre_scale, 1.0, opts));
  if (group_.size() > 1)
    for (const Tensor& g : grads)
      broadcast(group_, g.raw_data(), size_t(g.numel()) * size_t(itemsize(g.dtype())), 0, opts.timeout);
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace nexus::comm
