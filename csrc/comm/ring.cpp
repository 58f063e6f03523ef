// The ring schedule (see ring.h for the algorithm and vocabulary). One Ring object per call; its
// destructor cancels whatever is still posted, so a failed wait never leaves the transport
// holding pointers into freed buffers.
#include "comm/ring.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/env.h"
#include "base/error.h"

namespace nexus::comm {

Timeout default_timeout() {
  return std::chrono::duration_cast<Timeout>(std::chrono::duration<double>(knob_seconds("NEXUS_COMM_TIMEOUT")));
}

namespace {

// acc[i] = max(acc[i], in[i]) (or min); a NaN on either side wins, as numpy.maximum.
template <class T> void keep_extremum(ReduceOp op, T* acc, const T* in, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const T v = in[i];
    if (v != v || (op == ReduceOp::Max ? v > acc[i] : v < acc[i])) acc[i] = v;
  }
}

// How segments become bytes. float32 goes through the Codec (and the Residual when lossy);
// float64 travels raw.
template <class T> struct Wire;

template <> struct Wire<float> {
  const Codec& codec;
  Residual* residual;
  ReduceOp op;
  std::vector<float> scratch, incoming;

  bool lossless() const { return codec.lossless(); }
  // The wire format is the buffer itself: send from it and gather into it without copies.
  bool direct() const { return codec.lossless(); }
  size_t max_bytes(size_t n) const { return codec.max_encoded_bytes(n); }
  size_t encode(const float* data, size_t off, size_t n, std::byte* out) {
    if (residual && !codec.lossless()) return residual->encode(codec, off, data + off, n, out, scratch);
    return codec.encode(data + off, n, out);
  }
  // add: combine with what data holds (by op: a sum, or the larger/smaller value).
  void decode(const std::byte* in, size_t bytes, float* data, size_t off, size_t n, bool add) {
    if (add && is_extremum(op)) {
      incoming.resize(n);
      codec.decode(in, bytes, incoming.data(), n, false);
      keep_extremum(op, data + off, incoming.data(), n);
      return;
    }
    codec.decode(in, bytes, data + off, n, add);
  }
};

template <> struct Wire<double> {
  ReduceOp op;
  bool lossless() const { return true; }
  bool direct() const { return true; }
  size_t max_bytes(size_t n) const { return n * sizeof(double); }
  size_t encode(const double* data, size_t off, size_t n, std::byte* out) {
    if (n) std::memcpy(out, data + off, n * sizeof(double));
    return n * sizeof(double);
  }
  void decode(const std::byte* in, size_t bytes, double* data, size_t off, size_t n, bool add) {
    if (!add) {
      if (n) std::memcpy(data + off, in, bytes);
      return;
    }
    for (size_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, in + i * sizeof(double), sizeof(double));
      if (is_extremum(op)) keep_extremum(op, data + off + i, &v, 1);
      else data[off + i] += v;
    }
  }
};

// Staging memory reused across calls on this thread: allocating (and page-faulting) tens of MB
// per all-reduce cost more than the transfer itself. Grows, never shrinks.
std::byte* scratch(int which, size_t bytes) {
  thread_local std::vector<std::byte> buffers[2];
  std::vector<std::byte>& b = buffers[which];
  if (b.size() < bytes) b = std::vector<std::byte>(bytes);
  return b.data();
}

// What every entry point checks of the options against its buffer of n elements.
void check_buffer_options(const AllReduceOptions& o, size_t n, const char* name) {
  NX_CHECK(!o.residual || o.residual->size() == n, name, ": the Residual has ", o.residual ? o.residual->size() : 0,
           " elements but the buffer has ", n, "; keep one Residual per parameter buffer");
  NX_CHECK(o.segment_bytes > 0, name, ": segment_bytes must be > 0");
}

// Chunk c of n elements cut into N: sizes differ by at most one, the larger ones first.
RingChunk chunk_span(size_t n, int N, int c) {
  return {n / N * c + std::min<size_t>(c, n % N), n / N + (size_t(c) < n % N ? 1 : 0)};
}

template <class T> class Ring {
 public:
  Ring(Transport& t, T* data, size_t n, const AllReduceOptions& o, Wire<T>& wire)
      : t_(t), data_(data), n_(n), N_(t.size()), r_(t.rank()), wire_(wire), timeout_(o.timeout) {
    left_ = mod(r_ - 1);
    right_ = mod(r_ + 1);
    const size_t max_chunk = (n + N_ - 1) / N_;
    const size_t seg_elems = std::max<size_t>(1, o.segment_bytes / sizeof(T));
    K_ = std::max<size_t>(1, (max_chunk + seg_elems - 1) / seg_elems);
    slot_ = wire_.max_bytes((max_chunk + K_ - 1) / K_);
  }
  ~Ring() {
    for (Request& q : sreq_) t_.cancel(q);
    for (Request& q : rreq_) t_.cancel(q);
  }

  void reduce_scatter();
  void scale_owned(T factor);
  void all_gather();
  AllReduceStats stats;

 private:
  struct Span {
    size_t off, len;
  };
  int mod(int c) const { return ((c % N_) + N_) % N_; }
  Span segment(int chunk, size_t j) const {
    const auto [lo, len] = chunk_span(n_, N_, chunk);
    return {lo + len * j / K_, len * (j + 1) / K_ - len * j / K_};
  }
  Request send(const std::byte* bytes, size_t count, size_t elems, int tag) {
    stats.bytes_sent += count;
    stats.bytes_uncompressed += elems * sizeof(T);
    return t_.isend(right_, bytes, count, tag);
  }
  size_t wait(Request& q, const char* phase, int step, size_t j);
  size_t wait_recv(Request& q, const char* phase, int step, size_t j, size_t expected);

  Transport& t_;
  T* data_;
  size_t n_;
  int N_, r_, left_ = 0, right_ = 0;
  size_t K_ = 1, slot_ = 0;  // segments per chunk; bytes reserved per encoded segment
  Wire<T>& wire_;
  Timeout timeout_;
  std::vector<Request> sreq_, rreq_;
};

template <class T> size_t Ring<T>::wait(Request& q, const char* phase, int step, size_t j) {
  try {
    return t_.wait(q, timeout_);
  } catch (const CommError& e) {
    throw CommError(
        str("ring all-reduce, ", phase, " step ", step + 1, "/", N_ - 1, ", segment ", j + 1, "/", K_, ": ", e.what()));
  }
}

template <class T> size_t Ring<T>::wait_recv(Request& q, const char* phase, int step, size_t j, size_t expected) {
  const size_t got = wait(q, phase, step, j);
  if (got != expected)
    throw CommError(str("ring all-reduce, ", phase, " step ", step + 1, ": rank ", r_, " (this rank) received ", got,
                        " bytes from rank ", left_, ", expected ", expected,
                        ": the ranks disagree on the buffer size, dtype or codec"));
  return got;
}

template <class T> void Ring<T>::reduce_scatter() {
  const int S = N_ - 1;
  // Two sets of K slots, by step parity: step s+1 is posted while step s is still arriving.
  // Received segments are staged (they are added, not stored); a direct wire sends from data_.
  std::byte* rbuf = scratch(0, 2 * K_ * slot_);
  std::byte* sbuf = wire_.direct() ? nullptr : scratch(1, 2 * K_ * slot_);
  sreq_.assign(2 * K_, {});
  rreq_.assign(2 * K_, {});
  auto slot = [&](int s, size_t j) { return size_t(s % 2) * K_ + j; };
  auto post_recvs = [&](int s) {
    for (size_t j = 0; j < K_; ++j) {
      const size_t i = slot(s, j);
      rreq_[i] = t_.irecv(left_, rbuf + i * slot_, wire_.max_bytes(segment(mod(r_ - s - 1), j).len), kTagReduceScatter);
    }
  };
  auto encode_and_send = [&](int s, size_t j) {
    const size_t i = slot(s, j);
    wait(sreq_[i], "reduce-scatter", s, j);  // slot i last held step s-2's segment j
    const Span g = segment(mod(r_ - s), j);
    if (wire_.direct()) {
      sreq_[i] = send(reinterpret_cast<const std::byte*>(data_ + g.off), g.len * sizeof(T), g.len, kTagReduceScatter);
      return;
    }
    std::byte* out = sbuf + i * slot_;
    sreq_[i] = send(out, wire_.encode(data_, g.off, g.len, out), g.len, kTagReduceScatter);
  };

  post_recvs(0);
  for (size_t j = 0; j < K_; ++j) encode_and_send(0, j);
  for (int s = 0; s < S; ++s) {
    if (s + 1 < S) post_recvs(s + 1);
    for (size_t j = 0; j < K_; ++j) {
      const size_t i = slot(s, j);
      const Span g = segment(mod(r_ - s - 1), j);
      const size_t got = wait_recv(rreq_[i], "reduce-scatter", s, j, wire_.max_bytes(g.len));
      wire_.decode(rbuf + i * slot_, got, data_, g.off, g.len, true);
      // Segment j of this chunk is final for this hop: pass it on at once (the next step sends
      // the chunk just received), while segments j+1.. are still arriving.
      if (s + 1 < S) encode_and_send(s + 1, j);
    }
  }
  for (size_t i = 0; i < sreq_.size(); ++i) wait(sreq_[i], "reduce-scatter", S - 1, i % K_);
}

template <class T> void Ring<T>::scale_owned(T factor) {
  const int o = mod(r_ + 1);
  for (size_t j = 0; j < K_; ++j) {
    const Span g = segment(o, j);
    for (size_t i = g.off; i < g.off + g.len; ++i) data_[i] /= factor;
  }
}

template <class T> void Ring<T>::all_gather() {
  const int S = N_ - 1;
  // Encoded segments by (chunk, segment): received once, decoded, forwarded verbatim. A direct
  // wire receives straight into data_ and forwards from there (nothing to decode).
  const bool direct = wire_.direct();
  std::byte* store = direct ? nullptr : scratch(0, size_t(N_) * K_ * slot_);
  auto at = [&](int c, size_t j) { return size_t(c) * K_ + j; };
  auto where = [&](int c, size_t j) {
    return direct ? reinterpret_cast<std::byte*>(data_ + segment(c, j).off) : store + at(c, j) * slot_;
  };
  sreq_.assign(size_t(N_) * K_, {});
  rreq_.assign(size_t(N_) * K_, {});
  for (int s = 0; s < S; ++s)  // step s brings chunk r-s from the left
    for (size_t j = 0; j < K_; ++j) {
      const int c = mod(r_ - s);
      rreq_[at(c, j)] = t_.irecv(left_, where(c, j), wire_.max_bytes(segment(c, j).len), kTagAllGather);
    }
  const int owned = mod(r_ + 1);
  for (size_t j = 0; j < K_; ++j) {
    const Span g = segment(owned, j);
    std::byte* out = where(owned, j);
    const size_t bytes = direct ? g.len * sizeof(T) : wire_.encode(data_, g.off, g.len, out);
    // The owner keeps what everyone else will decode, so all ranks agree bit for bit.
    if (!wire_.lossless()) wire_.decode(out, bytes, data_, g.off, g.len, false);
    sreq_[at(owned, j)] = send(out, bytes, g.len, kTagAllGather);
  }
  for (int s = 0; s < S; ++s)
    for (size_t j = 0; j < K_; ++j) {
      const int c = mod(r_ - s);
      const Span g = segment(c, j);
      const std::byte* in = where(c, j);
      const size_t got = wait_recv(rreq_[at(c, j)], "all-gather", s, j, wire_.max_bytes(g.len));
      if (s + 1 < S) sreq_[at(c, j)] = send(in, got, g.len, kTagAllGather);
      if (!direct) wire_.decode(in, got, data_, g.off, g.len, false);
    }
  for (size_t i = 0; i < sreq_.size(); ++i) wait(sreq_[i], "all-gather", S - 1, i % K_);
}

enum class Phases { both, reduce_scatter, all_gather };

template <class T> AllReduceStats run(Transport& t, T* data, size_t n, const AllReduceOptions& o, Wire<T>& wire,
                                      Phases phases = Phases::both) {
  const auto start = std::chrono::steady_clock::now();
  NX_CHECK(o.segment_bytes > 0, "all_reduce: segment_bytes must be > 0");
  AllReduceStats stats;
  if (n > 0 && t.size() > 1) {
    Ring<T> ring(t, data, n, o, wire);
    if (phases != Phases::all_gather) ring.reduce_scatter();
    if (phases == Phases::both && o.op == ReduceOp::Mean) ring.scale_owned(T(t.size()));
    if (phases != Phases::reduce_scatter) ring.all_gather();
    stats = ring.stats;
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

// Top-k all-reduce: every rank picks its own top RATIO / N of each segment (after adding its
// error-feedback residual), the picks travel around the ring as an all-gather (forwarded
// verbatim), and every rank adds all N of them in rank order, so all ranks hold the same bits.
// The sum has at most RATIO of the entries, the wire carries about RATIO of the uncompressed
// ring's bytes, and what a rank did not send waits in its own residual: no partial sum is ever
// re-sparsified (which a ring of top-k codecs does at every hop).
AllReduceStats sparse_allreduce(Transport& t, float* data, size_t n, const AllReduceOptions& o, double ratio) {
  const auto start = std::chrono::steady_clock::now();
  const int N = t.size(), r = t.rank();
  AllReduceStats stats;
  if (n == 0 || N == 1) return stats;
  const auto local = make_topk_codec(ratio / N);
  const size_t seg = std::max<size_t>(1, o.segment_bytes / sizeof(float));
  // The message layout follows from n alone (top-k encodes a fixed size per segment).
  struct Segment {
    size_t off, len, at;  // elements [off, off + len), encoded at byte `at` of a message
  };
  std::vector<Segment> segments;
  size_t msg = 0;
  for (size_t off = 0; off < n; off += seg) {
    segments.push_back({off, std::min(seg, n - off), msg});
    msg += local->max_encoded_bytes(segments.back().len);
  }
  std::byte* store = scratch(0, size_t(N) * msg);
  auto message = [&](int q) { return store + size_t(q) * msg; };
  std::vector<float> work;
  for (const Segment& sg : segments) {
    std::byte* out = message(r) + sg.at;
    if (o.residual) o.residual->encode(*local, sg.off, data + sg.off, sg.len, out, work);
    else local->encode(data + sg.off, sg.len, out);
  }
  const int left = (r + N - 1) % N, right = (r + 1) % N;
  for (int step = 0; step + 1 < N; ++step) {
    const int give = (r - step + N) % N, take = (r - step - 1 + N) % N;
    Request recv = t.irecv(left, message(take), msg, kTagAllGather);
    Request send = t.isend(right, message(give), msg, kTagAllGather);
    stats.bytes_sent += msg;
    try {
      t.wait(send, o.timeout);
      const size_t got = t.wait(recv, o.timeout);
      if (got != msg)
        throw CommError(str("top-k all-reduce: rank ", r, " (this rank) received ", got, " bytes from rank ", left,
                            ", expected ", msg,
                            ": the ranks "
                            "disagree on the buffer size or codec"));
    } catch (const CommError& e) {
      t.cancel(send);
      t.cancel(recv);
      throw CommError(str("top-k all-reduce, step ", step + 1, "/", N - 1, ": ", e.what()));
    }
  }
  std::fill(data, data + n, 0.0f);
  for (int q = 0; q < N; ++q)
    for (const Segment& sg : segments)
      local->decode(message(q) + sg.at, local->max_encoded_bytes(sg.len), data + sg.off, sg.len, true);
  if (o.op == ReduceOp::Mean)
    for (size_t i = 0; i < n; ++i) data[i] /= float(N);
  stats.bytes_uncompressed = 2 * (n - n / size_t(N)) * sizeof(float);
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace

AllReduceStats ring_allreduce(Transport& t, float* data, size_t n, const AllReduceOptions& o) {
  check_reduce_op(o.op, "all_reduce: op", kReductions);
  const auto codec = o.codec ? o.codec : make_none_codec();
  NX_CHECK(!is_extremum(o.op) || codec->lossless(), "all_reduce: op \"", reduce_op_name(o.op),
           "\" takes codec \"none\", got \"", codec->spec(), "\": a lossy codec would change which value wins");
  check_buffer_options(o, n, "all_reduce");
  if (codec->topk_ratio() > 0) return sparse_allreduce(t, data, n, o, codec->topk_ratio());
  Wire<float> wire{*codec, o.residual, o.op, {}, {}};
  return run(t, data, n, o, wire);
}

AllReduceStats ring_allreduce(Transport& t, double* data, size_t n, const AllReduceOptions& o) {
  check_reduce_op(o.op, "all_reduce: op", kReductions);
  NX_CHECK(!o.codec || o.codec->lossless(), "all_reduce: codec \"", o.codec->spec(),
           "\" compresses float32 buffers; a float64 buffer takes codec \"none\"");
  Wire<double> wire{o.op};
  return run(t, data, n, o, wire);
}

RingChunk ring_owned_chunk(size_t n, int size, int rank) {
  NX_CHECK(size > 0 && rank >= 0 && rank < size, "ring_owned_chunk: rank ", rank, " of ", size);
  return chunk_span(n, size, (rank + 1) % size);  // reduce-scatter leaves rank r with chunk r+1
}

namespace {

AllReduceStats phase(Transport& t, void* data, DType dtype, size_t n, const AllReduceOptions& o, Phases which) {
  const char* name = which == Phases::reduce_scatter ? "reduce_scatter" : "all_gather";
  NX_CHECK(o.op == ReduceOp::Sum, name, ": op must be \"sum\", got \"", reduce_op_name(o.op), "\"");
  check_buffer_options(o, n, name);
  const auto codec = o.codec ? o.codec : make_none_codec();
  NX_CHECK(codec->topk_ratio() == 0, name, ": codec \"", codec->spec(),
           "\" reduces by all-gather, not in ring phases; use ring_allreduce");
  if (dtype == DType::Float64) {
    NX_CHECK(codec->lossless(), name, ": codec \"", codec->spec(), "\" compresses float32; float64 takes \"none\"");
    Wire<double> wire{o.op};
    return run(t, static_cast<double*>(data), n, o, wire, which);
  }
  NX_CHECK_TYPE(dtype == DType::Float32, name, ": buffers are float32 or float64, got ", dtype_name(dtype));
  Wire<float> wire{*codec, o.residual, o.op, {}, {}};
  return run(t, static_cast<float*>(data), n, o, wire, which);
}

}  // namespace

AllReduceStats ring_reduce_scatter(Transport& t, void* data, DType dtype, size_t n, const AllReduceOptions& o) {
  return phase(t, data, dtype, n, o, Phases::reduce_scatter);
}

AllReduceStats ring_all_gather(Transport& t, void* data, DType dtype, size_t n, const AllReduceOptions& o) {
  return phase(t, data, dtype, n, o, Phases::all_gather);
}

}  // namespace nexus::comm
