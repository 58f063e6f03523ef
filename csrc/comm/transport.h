// Transport: the point-to-point layer the ring runs on. Shaped after MPI's non-blocking calls so
// an MPI implementation (MPI_Isend / MPI_Irecv / MPI_Test / MPI_Cancel, in comm/mpi/) drops in:
//   isend / irecv post an operation and return a Request at once; the caller keeps the buffer
//   alive and untouched until wait() (or test() returning true) completes that Request.
//   Messages from one sender to one receiver with one tag are received in the order sent, and
//   receives posted for one (peer, tag) are matched in the order posted (MPI's non-overtaking rule).
//   Every wait has a timeout; on timeout it throws CommError naming this rank and the peer.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

namespace nexus::comm {

// A communication failure: a timeout, a peer that failed or left, a message of the wrong size.
// The message always names this rank and the peer (STYLE habit 9).
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using Timeout = std::chrono::milliseconds;

// Handle of one posted operation. id < 0: nothing pending (never posted, or already completed).
struct Request {
  int64_t id = -1;
  bool pending() const { return id >= 0; }
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual Request isend(int peer, const void* data, size_t bytes, int tag) = 0;
  // Receives one message of at most `capacity` bytes (a larger one is a CommError).
  virtual Request irecv(int peer, void* data, size_t capacity, int tag) = 0;
  // Completes `req` (and clears it); returns the bytes sent or received. Throws CommError after
  // `timeout`, naming this rank, the peer, the tag and the byte count.
  virtual size_t wait(Request& req, Timeout timeout) = 0;
  // Non-blocking completion check; true (and `req` cleared, `*bytes` set) once it completed.
  virtual bool test(Request& req, size_t* bytes = nullptr) = 0;
  // Abandons a pending operation (after an error), so the transport never touches its buffer again.
  virtual void cancel(Request& req) = 0;
  // On: the caller is a background thread sharing cores with computation, so waits should not
  // keep it runnable (see MpiTransport). A hint; transports may ignore it.
  virtual void set_background(bool /*on*/) {}
};

// set_background(true) for the life of the scope, however it ends.
class BackgroundScope {
 public:
  explicit BackgroundScope(Transport& t) : t_(t) { t_.set_background(true); }
  ~BackgroundScope() { t_.set_background(false); }
  BackgroundScope(const BackgroundScope&) = delete;
  BackgroundScope& operator=(const BackgroundScope&) = delete;

 private:
  Transport& t_;
};

}  // namespace nexus::comm
