#include "comm/loopback_transport.h"

#include <cstring>

#include "base/error.h"

namespace nexus::comm {

Hub::Hub(int size)
    : size_(size), arrived_(new std::condition_variable[size > 0 ? size : 1]), joined_(size > 0 ? size : 1, false) {
  NX_CHECK(size >= 1, "loopback Hub: size must be >= 1, got ", size);
}

std::string Hub::missing_ranks() {
  std::string out;
  for (int r = 0; r < size_; ++r)
    if (!joined_[r]) out += str(out.empty() ? "" : ", ", r);
  return out;
}

void Hub::abort(int rank, const std::string& reason) {
  {
    std::lock_guard lock(mu_);
    if (aborted_by_ >= 0) return;  // the first failure is the one worth reporting
    aborted_by_ = rank;
    abort_reason_ = reason;
  }
  for (int r = 0; r < size_; ++r) arrived_[r].notify_all();
}

LoopbackTransport::LoopbackTransport(std::shared_ptr<Hub> hub, int rank) : hub_(std::move(hub)), rank_(rank) {
  NX_CHECK(rank >= 0 && rank < hub_->size(), "loopback transport: rank ", rank, " is outside the group of ",
           hub_->size(), " ranks");
  std::lock_guard lock(hub_->mu_);
  hub_->joined_[rank] = true;
}

void LoopbackTransport::check_peer(int peer, const char* what) const {
  NX_CHECK(peer >= 0 && peer < size(), what, ": rank ", rank_, " named peer rank ", peer, ", valid peers are 0..",
           size() - 1);
}

std::string LoopbackTransport::describe(const Op& op) const {
  return op.data ? str("receive of up to ", op.bytes, " bytes from rank ", op.peer, " (tag ", op.tag, ")")
                 : str("send of ", op.bytes, " bytes to rank ", op.peer, " (tag ", op.tag, ")");
}

Request LoopbackTransport::isend(int peer, const void* data, size_t bytes, int tag) {
  check_peer(peer, "isend");
  std::vector<std::byte> msg(bytes);
  if (bytes) std::memcpy(msg.data(), data, bytes);
  {
    std::lock_guard lock(hub_->mu_);
    hub_->mail_[{rank_, peer, tag}].push_back(std::move(msg));
  }
  hub_->arrived_[peer].notify_all();
  int64_t id = next_id_++;
  ops_.emplace(id, Op{peer, tag, nullptr, bytes, true});  // buffered: complete at once
  return Request{id};
}

Request LoopbackTransport::irecv(int peer, void* data, size_t capacity, int tag) {
  check_peer(peer, "irecv");
  int64_t id = next_id_++;
  // data is never null for a receive (it marks the op as one); a 0-byte buffer may be.
  static std::byte empty;
  ops_.emplace(id, Op{peer, tag, data ? data : &empty, capacity, false});
  std::lock_guard lock(hub_->mu_);
  posted_[{peer, tag}].push_back(id);
  return Request{id};
}

void LoopbackTransport::match_locked(int peer, int tag) {
  auto& queue = posted_[{peer, tag}];
  auto box = hub_->mail_.find({peer, rank_, tag});
  while (!queue.empty() && box != hub_->mail_.end() && !box->second.empty()) {
    Op& op = ops_.at(queue.front());
    std::vector<std::byte>& msg = box->second.front();
    if (msg.size() > op.bytes)
      throw CommError(str("rank ", rank_, " (this rank) received ", msg.size(), " bytes from rank ", peer, " (tag ",
                          tag, ") into a buffer of ", op.bytes,
                          " bytes: the ranks disagree on the buffer size or codec"));
    if (!msg.empty()) std::memcpy(op.data, msg.data(), msg.size());
    op.bytes = msg.size();
    op.done = true;
    box->second.pop_front();
    queue.pop_front();
  }
}

bool LoopbackTransport::test(Request& req, size_t* bytes) {
  if (!req.pending()) return true;
  auto it = ops_.find(req.id);
  NX_ASSERT(it != ops_.end(), "unknown request ", req.id);
  if (!it->second.done) {
    std::lock_guard lock(hub_->mu_);
    match_locked(it->second.peer, it->second.tag);
  }
  if (!it->second.done) return false;
  if (bytes) *bytes = it->second.bytes;
  ops_.erase(it);
  req.id = -1;
  return true;
}

size_t LoopbackTransport::wait(Request& req, Timeout timeout) {
  if (!req.pending()) return 0;
  auto it = ops_.find(req.id);
  NX_ASSERT(it != ops_.end(), "unknown request ", req.id);
  Op& op = it->second;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock lock(hub_->mu_);
  while (true) {
    if (!op.done) match_locked(op.peer, op.tag);
    if (op.done) break;
    if (hub_->aborted_by_ >= 0)
      throw CommError(str("rank ", rank_, " (this rank) gave up on a ", describe(op), ": rank ", hub_->aborted_by_,
                          " failed: ", hub_->abort_reason_));
    if (hub_->arrived_[rank_].wait_until(lock, deadline) == std::cv_status::timeout) {
      match_locked(op.peer, op.tag);
      if (op.done) break;
      const std::string missing = hub_->missing_ranks();
      throw CommError(str("rank ", rank_, " (this rank) timed out after ", double(timeout.count()) / 1000.0,
                          " s waiting for a ", describe(op), ": rank ", op.peer,
                          " did not send; it may have failed, not joined, "
                          "or be running a different collective",
                          missing.empty() ? "" : "; ranks that never joined: ", missing));
    }
  }
  size_t bytes = op.bytes;
  ops_.erase(it);
  req.id = -1;
  return bytes;
}

void LoopbackTransport::cancel(Request& req) {
  if (!req.pending()) return;
  auto it = ops_.find(req.id);
  if (it != ops_.end()) {
    if (!it->second.done) {
      std::lock_guard lock(hub_->mu_);
      auto& queue = posted_[{it->second.peer, it->second.tag}];
      std::erase(queue, req.id);
    }
    ops_.erase(it);
  }
  req.id = -1;
}

}  // namespace nexus::comm
