#include "comm/shared_step.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <new>
#include <random>
#include <string>

#include "base/error.h"

namespace nexus::comm {

namespace {

constexpr uint64_t kMagic = 0x4e58534841524544ull;  // "NXSHARED"
constexpr int kTagOffer = 0x4e10, kTagReply = 0x4e11, kTagVerdict = 0x4e12;
constexpr size_t kLine = 64, kPage = 4096;
// Elements per part boundary: parts start on a cache line of either dtype.
constexpr size_t kPartAlign = 16;

struct alignas(kLine) Control {
  std::atomic<uint32_t> arrived;
  std::atomic<uint32_t> generation;  // the futex word: bumped when the last rank arrives
  uint64_t magic, token;
};

struct alignas(kLine) RankRecord {
  SharedStep::Record record;
  double sumsq = 0;                   // of this rank's part of the reduced gradient (clipping)
  std::atomic<uint32_t> arrivals{0};  // barriers this rank has reached (for timeout messages)
};

struct Offer {
  uint64_t ok = 0, token = 0, bytes = 0;
  char name[48] = {};
};

size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

// Control, records, then 64-byte aligned regions of `n` elements: N slots, P, M, V.
size_t region_bytes(size_t n, size_t item) { return round_up(n * item, kLine); }
size_t header_bytes(int size) { return round_up(sizeof(Control) + size_t(size) * sizeof(RankRecord), kPage); }

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

uint64_t random_token() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd() ^ uint64_t(getpid()) << 16;
}

// The largest segment we make: a quarter of the machine's memory (the segment holds copies of the
// model that the ranks would otherwise hold in their own memory, but it is one more place to fill).
size_t max_segment_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? size_t(pages) * size_t(page) / 4 : 0;
}

template <class T>
void reduce_part(T* out, const std::vector<const T*>& in, const std::vector<double>& weights, size_t n) {
  // Blocks that stay in the first-level cache while every slot is added in; rank order, so the
  // bits do not depend on who computes them.
  constexpr size_t kBlock = 1024;
  T acc[kBlock];
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t m = std::min(kBlock, n - b);
    const T w0 = T(weights[0]);
    const T* s0 = in[0] + b;
    for (size_t i = 0; i < m; ++i) acc[i] = w0 * s0[i];
    for (size_t q = 1; q < in.size(); ++q) {
      const T w = T(weights[q]);
      const T* s = in[q] + b;
      for (size_t i = 0; i < m; ++i) acc[i] += w * s[i];
    }
    std::memcpy(out + b, acc, m * sizeof(T));
  }
}

}  // namespace

struct SharedStep::Mapping {
  void* base = nullptr;
  size_t bytes = 0;
  ~Mapping() {
    if (base) munmap(base, bytes);
  }
  Control* control() const { return static_cast<Control*>(base); }
  RankRecord* records() const { return reinterpret_cast<RankRecord*>(static_cast<char*>(base) + sizeof(Control)); }
};

namespace {

// Rank 0's side: a new segment of `bytes`, named in `offer` and mapped at the address returned
// (null on failure, when nothing is left in /dev/shm and offer.ok stays 0).
void* create_segment(Offer& offer, size_t bytes) {
  offer.token = random_token();
  std::snprintf(offer.name, sizeof offer.name, "/nexus-dp-%d-%016llx", int(getpid()),
                static_cast<unsigned long long>(offer.token));
  const int fd = shm_open(offer.name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return nullptr;
  // posix_fallocate: a /dev/shm too small for the segment is an error now, not a SIGBUS later.
  void* base = ftruncate(fd, off_t(bytes)) == 0 && posix_fallocate(fd, 0, off_t(bytes)) == 0
                   ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                   : MAP_FAILED;
  close(fd);
  if (base == MAP_FAILED) {
    shm_unlink(offer.name);
    return nullptr;
  }
  offer.ok = 1;
  offer.bytes = bytes;
  return base;
}

}  // namespace

std::unique_ptr<SharedStep> SharedStep::open(Transport& world, const std::vector<Tensor>& params, bool wanted,
                                             Timeout timeout) {
  const int rank = world.rank(), size = world.size();
  if (size < 2 || params.empty()) return nullptr;
  // What this rank can take part with. Every rank goes through the whole handshake whatever it
  // finds here (ranks may differ, say one with its parameters on a device), so that no rank
  // waits for one that skipped it; any rank that cannot join makes all of them keep the ring.
  bool usable =
      wanted && params[0].defined() && (params[0].dtype() == DType::Float32 || params[0].dtype() == DType::Float64);
  const DType dtype = params[0].defined() ? params[0].dtype() : DType::Float32;
  size_t n = 0;
  for (const Tensor& p : params) {
    usable = usable && p.defined() && p.dtype() == dtype && p.device().is_cpu() && p.is_contiguous();
    if (p.defined()) n += size_t(p.numel());
  }
  usable = usable && n > 0;
  const size_t bytes = header_bytes(size) + (size_t(size) + 3) * region_bytes(n, itemsize(dtype));

  auto map = std::make_shared<Mapping>();
  Offer offer;
  bool joined = false;
  if (rank == 0) {
    if (usable && bytes <= max_segment_bytes()) {
      if (void* base = create_segment(offer, bytes)) {
        map->base = base;
        map->bytes = bytes;
        Control* c = new (base) Control{};
        for (int r = 0; r < size; ++r) new (map->records() + r) RankRecord{};
        c->magic = kMagic;
        c->token = offer.token;
      }
    }
    // The name goes once every rank has answered, or on the way out of a failed handshake.
    struct Unlink {
      const Offer& offer;
      ~Unlink() {
        if (offer.ok) shm_unlink(offer.name);
      }
    } unlink{offer};
    std::vector<Request> sends;
    for (int r = 1; r < size; ++r) sends.push_back(world.isend(r, &offer, sizeof offer, kTagOffer));
    for (Request& s : sends) world.wait(s, timeout);
    joined = offer.ok != 0;
    for (int r = 1; r < size; ++r) {
      uint64_t ok = 0;
      Request req = world.irecv(r, &ok, sizeof ok, kTagReply);
      world.wait(req, timeout);
      joined = joined && ok == 1;
    }
    uint64_t verdict = joined ? 1 : 0;
    sends.clear();
    for (int r = 1; r < size; ++r) sends.push_back(world.isend(r, &verdict, sizeof verdict, kTagVerdict));
    for (Request& s : sends) world.wait(s, timeout);
  } else {
    Request req = world.irecv(0, &offer, sizeof offer, kTagOffer);
    world.wait(req, timeout);
    uint64_t ok = 0;
    offer.name[sizeof offer.name - 1] = '\0';
    if (usable && offer.ok && offer.bytes == bytes) {
      const int fd = shm_open(offer.name, O_RDWR, 0600);
      struct stat st{};
      if (fd >= 0 && fstat(fd, &st) == 0 && size_t(st.st_size) == bytes) {
        void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (base != MAP_FAILED) {
          map->base = base;
          map->bytes = bytes;
          // The same segment, not one of the same name on another machine's /dev/shm.
          ok = map->control()->magic == kMagic && map->control()->token == offer.token ? 1 : 0;
        }
      }
      if (fd >= 0) close(fd);
    }
    Request reply = world.isend(0, &ok, sizeof ok, kTagReply);
    world.wait(reply, timeout);
    uint64_t verdict = 0;
    Request v = world.irecv(0, &verdict, sizeof verdict, kTagVerdict);
    world.wait(v, timeout);
    joined = verdict == 1;
  }
  if (!joined) return nullptr;
  return std::unique_ptr<SharedStep>(new SharedStep(std::move(map), params, rank, size, timeout));
}

SharedStep::SharedStep(std::shared_ptr<Mapping> map, const std::vector<Tensor>& params, int rank, int size,
                       Timeout timeout)
    : map_(std::move(map)),
      rank_(rank),
      size_(size),
      dtype_(params[0].dtype()),
      item_(itemsize(params[0].dtype())),
      timeout_(timeout) {
  for (const Tensor& p : params) {
    offset_.push_back(n_);
    numel_.push_back(size_t(p.numel()));
    n_ += size_t(p.numel());
  }
  // One storage per parameter over its place in the published region, marked shared: an update
  // outside this step (ops::optim::step) moves the parameter back to memory of its own first.
  char* published = static_cast<char*>(slot(size_));
  for (size_t i = 0; i < numel_.size(); ++i) {
    published_.push_back(
        std::make_shared<Storage>(published + offset_[i] * item_, numel_[i] * item_, [keep = map_](void*) {}));
    published_.back()->mark_shared();
  }
}

// Parameters still in the segment get memory of their own again, with their current values
// (nothing writes the segment now: a rank writes its part only between two meetings of all).
SharedStep::~SharedStep() {
  for (size_t i = 0; i < bound_.size(); ++i)
    if (bound_[i].defined() && bound_[i].storage() == published_[i]) ops::optim::move_to_own_memory(bound_[i]);
}

size_t SharedStep::bytes() const { return map_->bytes; }

void* SharedStep::slot(int r) const {
  // r in [0, size): gradient slots; size: the published parameters; size + 1, + 2: the moments.
  return static_cast<char*>(map_->base) + header_bytes(size_) + size_t(r) * region_bytes(n_, item_);
}

Tensor SharedStep::view(void* at, size_t n) const {
  return Tensor::view_of(std::make_shared<Storage>(at, n * item_, [](void*) {}), 0, {int64_t(n)}, {1}, dtype_);
}

void SharedStep::barrier(const char* phase) {
  Control* c = map_->control();
  RankRecord& me = map_->records()[rank_];
  me.arrivals.store(++arrivals_, std::memory_order_relaxed);
  const uint32_t gen = c->generation.load(std::memory_order_acquire);
  if (c->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == uint32_t(size_)) {
    c->arrived.store(0, std::memory_order_relaxed);
    c->generation.fetch_add(1, std::memory_order_release);
    futex(&c->generation, FUTEX_WAKE, uint32_t(size_), nullptr);
    return;
  }
  // A short spin (the ranks often arrive within microseconds of each other), then sleep in the
  // kernel: a rank that shares its core hands it over at once instead of spinning its slice away.
  for (int i = 0; i < 256; ++i) {
    if (c->generation.load(std::memory_order_acquire) != gen) return;
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (c->generation.load(std::memory_order_acquire) == gen) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      std::string late;
      for (int r = 0; r < size_; ++r)
        if (map_->records()[r].arrivals.load(std::memory_order_relaxed) < arrivals_)
          late += str(late.empty() ? "" : ", ", r);
      throw CommError(str("DataParallel (shared memory): rank ", rank_, " (this rank) waited ",
                          std::chrono::duration<double>(timeout_).count(), " s at the ", phase, " for rank(s) ", late,
                          "; a rank failed or stopped (NEXUS_COMM_TIMEOUT sets the limit)"));
    }
    const auto wait = std::min<std::chrono::nanoseconds>(deadline - now, std::chrono::milliseconds(100));
    timespec ts{time_t(wait.count() / 1000000000), long(wait.count() % 1000000000)};
    futex(&c->generation, FUTEX_WAIT, gen, &ts);
  }
}

bool SharedStep::can_shard(const ops::optim::Config& c, const ops::optim::State& s, size_t num_params) {
  using Kind = ops::optim::Config::Kind;
  const bool momentum = c.kind != Kind::SGD || c.momentum != 0;
  const bool second = c.kind != Kind::SGD;
  if (s.param_steps.size() != num_params) return !momentum && s.param_steps.empty() && s.m.empty() && s.v.empty();
  for (size_t i = 0; i < num_params; ++i) {
    if (s.param_steps[i] != s.param_steps[0]) return false;
    if (momentum && !s.m[i].defined()) return false;
    if (second && !s.v[i].defined()) return false;
  }
  return true;
}

void SharedStep::copy_in(size_t p, const Tensor& grad) {
  NX_ASSERT(p < numel_.size() && grad.defined() && size_t(grad.numel()) == numel_[p] && grad.dtype() == dtype_ &&
            grad.is_contiguous());
  std::memcpy(static_cast<char*>(slot(rank_)) + offset_[p] * item_, grad.raw_data(), numel_[p] * item_);
}

std::vector<SharedStep::Record> SharedStep::exchange(const Record& mine) {
  map_->records()[rank_].record = mine;
  barrier("exchange of the step's counts");
  std::vector<Record> all(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) all[size_t(r)] = map_->records()[r].record;
  return all;
}

// The state's moment buffers become views of the segment's: each rank writes its own part of
// the values the state held (the same on every rank), so after the next wait every rank's state
// reads the whole, current moments.
void SharedStep::bind_state(const ops::optim::Config& c, ops::optim::State& s) {
  using Kind = ops::optim::Config::Kind;
  const int regions[2] = {size_ + 1, size_ + 2};
  std::vector<Tensor>* buffers[2] = {&s.m, &s.v};
  const int used = c.kind == Kind::SGD ? (c.momentum != 0 ? 1 : 0) : 2;
  for (int k = 0; k < used; ++k) {
    char* base = static_cast<char*>(slot(regions[k]));
    for (size_t i = 0; i < numel_.size(); ++i) {
      Tensor& buf = (*buffers[k])[i];
      char* at = base + offset_[i] * item_;
      if (buf.raw_data() == at) continue;
      const size_t a = std::max(lo_, offset_[i]), b = std::min(hi_, offset_[i] + numel_[i]);
      if (a < b)
        std::memcpy(at + (a - offset_[i]) * item_, static_cast<const char*>(buf.raw_data()) + (a - offset_[i]) * item_,
                    (b - a) * item_);
      // The view keeps the mapping alive: a state outlives the reducer that made it. Marked
      // shared, so that an update outside this step (another optimizer call on this state)
      // copies it rather than write into the other ranks' moments.
      auto storage = std::make_shared<Storage>(at, numel_[i] * item_, [keep = map_](void*) {});
      storage->mark_shared();
      buf = Tensor::view_of(storage, 0, buf.shape(), buf.strides(), dtype_);
    }
  }
}

// Parameters not in the segment (the first sharded step, or one an update outside this step moved
// out) put this rank's part of their values there, as bind_state does for the moments: the
// values are the same on every rank, and after this step's second meeting all parts are in.
void SharedStep::bind_params(const std::vector<Tensor>& params) {
  if (bound_.empty()) bound_.resize(numel_.size());
  for (size_t i = 0; i < numel_.size(); ++i) {
    NX_ASSERT(params[i].defined() && size_t(params[i].numel()) == numel_[i] && params[i].dtype() == dtype_ &&
              params[i].is_contiguous() && params[i].device().is_cpu());
    if (params[i].storage() == published_[i]) continue;
    const size_t a = std::max(lo_, offset_[i]), b = std::min(hi_, offset_[i] + numel_[i]);
    const size_t skip = (a - offset_[i]) * item_;
    if (a < b)
      std::memcpy(static_cast<char*>(published_[i]->data()) + skip,
                  static_cast<const char*>(params[i].raw_data()) + skip, (b - a) * item_);
  }
}

void SharedStep::reduce(size_t a, size_t b, const std::vector<double>& weights) {
  char* out = static_cast<char*>(slot(rank_)) + a * item_;  // this rank's part of its own slot
  if (dtype_ == DType::Float64) {
    std::vector<const double*> in;
    for (int r = 0; r < size_; ++r) in.push_back(static_cast<const double*>(slot(r)) + a);
    reduce_part(reinterpret_cast<double*>(out), in, weights, b - a);
  } else {
    std::vector<const float*> in;
    for (int r = 0; r < size_; ++r) in.push_back(static_cast<const float*>(slot(r)) + a);
    reduce_part(reinterpret_cast<float*>(out), in, weights, b - a);
  }
}

void SharedStep::step(size_t a, size_t b, const ops::optim::Config& c, double lr, const ops::optim::State& s) {
  // The flat range [a, b), parameter by parameter, through the one optimizer kernel: views of the
  // segment's parameters, of the reduced gradient in this rank's slot and of the segment's
  // moments (through storages not marked shared: this is the step that owns them).
  char* reduced = static_cast<char*>(slot(rank_));
  ops::optim::State piece;
  piece.step = s.step;
  std::vector<Tensor> ps, gs;
  for (size_t i = 0; i < numel_.size(); ++i) {
    const size_t lo = std::max(a, offset_[i]), hi = std::min(b, offset_[i] + numel_[i]);
    if (lo >= hi) continue;
    const size_t skip = lo - offset_[i];
    ps.push_back(view(static_cast<char*>(published_[i]->data()) + skip * item_, hi - lo));
    gs.push_back(view(reduced + lo * item_, hi - lo));
    piece.param_steps.push_back(s.param_steps.empty() ? 0 : s.param_steps[i]);
    for (auto [from, to] : {std::pair{&s.m, &piece.m}, std::pair{&s.v, &piece.v}})
      if (from->empty() || !(*from)[i].defined()) to->emplace_back();
      else to->push_back(view(static_cast<char*>((*from)[i].raw_data()) + skip * item_, hi - lo));
  }
  if (!ps.empty()) ops::optim::step(c, lr, ps, gs, piece);
}

void SharedStep::update(const ops::optim::Config& c, double lr, const std::vector<Tensor>& params,
                        const std::vector<double>& weights, ops::optim::State& s) {
  NX_ASSERT(params.size() == numel_.size() && weights.size() == size_t(size_));
  ops::optim::validate(c, lr);  // before writing anything: every rank throws alike
  // This rank's part: its share of the step's samples (a rank given more of the batch computes
  // faster, so it updates more too), cut at cache-line boundaries. Parameters and moments are
  // in the segment, whole, so parts may move from step to step.
  double before = 0;
  for (int r = 0; r < rank_; ++r) before += weights[size_t(r)];
  const auto cut = [&](double share) { return std::min(n_, round_up(size_t(share * double(n_)), kPartAlign)); };
  lo_ = cut(before);
  hi_ = rank_ + 1 == size_ ? n_ : cut(before + weights[size_t(rank_)]);
  bind_state(c, s);
  bind_params(params);
  ops::optim::Config local = c;
  reduce(lo_, hi_, weights);
  if (c.clip_norm > 0) {  // the norm of the whole reduced gradient: every rank's part of it
    const Tensor part = view(static_cast<char*>(slot(rank_)) + lo_ * item_, hi_ - lo_);
    map_->records()[rank_].sumsq = ops::optim::sum_squares({part});
    barrier("exchange of the gradient's norm");
    double total = 0;
    for (int r = 0; r < size_; ++r) total += map_->records()[r].sumsq;
    const double coef = ops::optim::clip_scale(std::sqrt(total), c.clip_norm);
    if (coef != 1.0) ops::optim::scale_({part}, coef);
    local.clip_norm = 0;
  }
  step(lo_, hi_, local, lr, s);
  barrier("exchange of the updated parameters");
  // Every part is in the segment now: parameters not there yet move in, and none is copied.
  for (size_t i = 0; i < numel_.size(); ++i)
    if (params[i].storage() != published_[i]) {
      params[i].rebind(published_[i], 0);
      bound_[i] = params[i];
    }
  if (s.param_steps.empty()) s.param_steps.assign(numel_.size(), 0);
  if (s.m.empty()) s.m.resize(numel_.size());
  if (s.v.empty()) s.v.resize(numel_.size());
  for (int64_t& t : s.param_steps) ++t;
  ++s.step;
}

}  // namespace nexus::comm
