// The loopback transport: N ranks as threads in one process (STYLE habit 8; Gloo's spawnThreads,
// PyTorch's FakeProcessGroup). A Hub owns the mailboxes, one FIFO per (src, dst, tag); each rank
// holds a LoopbackTransport over the shared Hub. Sends copy eagerly into the mailbox and complete
// at once; receives complete when a matching message is there. Waits honour their timeout.
// Hub::abort lets a rank that failed wake everyone else, who then throw CommError naming it.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "comm/transport.h"

namespace nexus::comm {

class Hub {
 public:
  explicit Hub(int size);
  int size() const { return size_; }
  // Marks the group failed: every wait in progress or to come throws CommError naming `rank`.
  void abort(int rank, const std::string& reason);
  // Ranks that never created their transport, for timeout messages ("" when all joined).
  std::string missing_ranks();

 private:
  friend class LoopbackTransport;
  using Key = std::tuple<int, int, int>;  // (src, dst, tag)
  int size_;
  std::mutex mu_;
  std::unique_ptr<std::condition_variable[]> arrived_;  // one per destination rank
  std::map<Key, std::deque<std::vector<std::byte>>> mail_;
  std::vector<bool> joined_;
  int aborted_by_ = -1;
  std::string abort_reason_;
};

class LoopbackTransport final : public Transport {
 public:
  LoopbackTransport(std::shared_ptr<Hub> hub, int rank);
  int rank() const override { return rank_; }
  int size() const override { return hub_->size(); }
  Request isend(int peer, const void* data, size_t bytes, int tag) override;
  Request irecv(int peer, void* data, size_t capacity, int tag) override;
  size_t wait(Request& req, Timeout timeout) override;
  bool test(Request& req, size_t* bytes = nullptr) override;
  void cancel(Request& req) override;

 private:
  struct Op {
    int peer, tag;
    void* data;    // receives only
    size_t bytes;  // capacity until done, then the size received (or sent)
    bool done;
  };
  // Matches posted receives for (peer, tag) with arrived messages, in order. Caller holds mu_.
  void match_locked(int peer, int tag);
  void check_peer(int peer, const char* what) const;
  std::string describe(const Op& op) const;

  std::shared_ptr<Hub> hub_;
  int rank_;
  int64_t next_id_ = 0;
  std::unordered_map<int64_t, Op> ops_;
  std::map<std::pair<int, int>, std::deque<int64_t>> posted_;  // (peer, tag) -> receives in order
};

}  // namespace nexus::comm
