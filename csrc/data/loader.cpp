#include "data/loader.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "base/error.h"

namespace nexus::data {

int64_t batch_count(int64_t rows, const LoaderOptions& opt) {
  return opt.drop_last ? rows / opt.batch_size : (rows + opt.batch_size - 1) / opt.batch_size;
}

std::pair<int64_t, int64_t> shard_of(int64_t rows, const LoaderOptions& opt) {
  if (opt.shares.empty()) return {0, rows};
  int64_t before = 0;
  for (int r = 0; r < opt.rank; ++r) before += opt.shares[size_t(r)];
  int64_t upto = before + opt.shares[size_t(opt.rank)];
  return {before * rows / opt.batch_size, upto * rows / opt.batch_size};
}

std::vector<int64_t> epoch_order(int64_t rows, const LoaderOptions& opt, uint64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(rows));
  std::iota(order.begin(), order.end(), int64_t(0));
  if (!opt.shuffle) return order;
  uint64_t state = opt.seed * 0x9E3779B97F4A7C15ull + epoch * 0xD1B54A32D192ED03ull + 1;
  auto next = [&] {  // splitmix64
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  for (int64_t i = rows - 1; i > 0; --i) {
    auto j = int64_t((unsigned __int128)next() * uint64_t(i + 1) >> 64);  // in [0, i]
    std::swap(order[size_t(i)], order[size_t(j)]);
  }
  return order;
}

Buffer BufferPool::take(size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i].bytes != bytes) continue;
      Buffer b = std::move(free_[i]);
      free_.erase(free_.begin() + ptrdiff_t(i));
      return b;
    }
  }
  return Buffer::allocate(bytes);
}

void BufferPool::give(Buffer b) {
  constexpr size_t kMaxFree = 64;
  std::lock_guard<std::mutex> lock(mutex_);
  if (free_.size() < kMaxFree) free_.push_back(std::move(b));
}

BatchProducer::BatchProducer(std::vector<LoaderSource> sources, LoaderOptions opt, uint64_t epoch,
                             std::shared_ptr<BufferPool> pool)
    : sources_(std::move(sources)), opt_(std::move(opt)), pool_(std::move(pool)) {
  NX_CHECK(!sources_.empty(), "DataLoader: no arrays given");
  NX_CHECK(opt_.batch_size >= 1, "DataLoader: batch_size must be >= 1, got ", opt_.batch_size);
  NX_CHECK(opt_.prefetch >= 0, "DataLoader: prefetch must be >= 0, got ", opt_.prefetch);
  rows_ = sources_[0].rows;
  for (const auto& s : sources_)
    NX_CHECK(s.rows == rows_, "DataLoader: every array needs the same number of rows; got ", rows_, " and ", s.rows);
  if (!opt_.shares.empty()) {
    int64_t sum = 0;
    for (int64_t s : opt_.shares) {
      NX_CHECK(s >= 0, "DataLoader: shares must be >= 0");
      sum += s;
    }
    NX_CHECK(sum == opt_.batch_size, "DataLoader: shares sum to ", sum, " but batch_size is ", opt_.batch_size);
    NX_CHECK_INDEX(opt_.rank >= 0 && size_t(opt_.rank) < opt_.shares.size(), "DataLoader: rank ", opt_.rank,
                   " out of range for ", opt_.shares.size(), " ranks");
  }
  order_ = epoch_order(rows_, opt_, epoch);
  batches_ = batch_count(rows_, opt_);
  if (opt_.prefetch > 0) thread_ = std::thread([this] { run(); });
}

BatchProducer::~BatchProducer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Batch BatchProducer::make(int64_t b) {
  int64_t start = b * opt_.batch_size;
  int64_t rows = std::min(opt_.batch_size, rows_ - start);
  auto [lo, hi] = shard_of(rows, opt_);
  Batch out;
  out.indices.assign(order_.begin() + start + lo, order_.begin() + start + hi);
  for (const auto& s : sources_) {
    Buffer buf = pool_->take(size_t(hi - lo) * size_t(s.row_bytes));
    std::byte* dst = buf.data.get();
    for (int64_t i : out.indices) {
      std::memcpy(dst, s.data + i * s.row_bytes, size_t(s.row_bytes));
      dst += s.row_bytes;
    }
    out.columns.push_back(std::move(buf));
  }
  return out;
}

void BatchProducer::run() {
  try {
    for (int64_t b = 0; b < batches_; ++b) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return stop_ || int64_t(ready_.size()) < opt_.prefetch; });
        if (stop_) return;
      }
      Batch batch = make(b);
      std::lock_guard<std::mutex> lock(mutex_);
      ready_.push_back(std::move(batch));
      changed_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  finished_ = true;
  changed_.notify_all();
}

bool BatchProducer::next(Batch& out) {
  if (opt_.prefetch == 0) {
    if (taken_ >= batches_) return false;
    out = make(taken_++);
    return true;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !ready_.empty() || finished_; });
  if (ready_.empty()) {
    if (error_) std::rethrow_exception(error_);
    return false;
  }
  out = std::move(ready_.front());
  ready_.pop_front();
  ++taken_;
  changed_.notify_all();
  return true;
}

}  // namespace nexus::data
