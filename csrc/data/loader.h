// The batch loader: a background std::thread gathers the rows of each batch (this rank's shard of
// it) into buffers while the caller trains on the previous ones. Buffers are recycled through a
// pool once the caller drops them. The producer never touches Python.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "data/column.h"

namespace nexus::data {

struct LoaderSource {
  const std::byte* data;  // C-contiguous rows
  int64_t rows;
  int64_t row_bytes;
};

struct LoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
  int prefetch = 2;             // batches prepared ahead; 0: prepared on demand in next()
  std::vector<int64_t> shares;  // per-rank rows of a full batch (sum = batch_size); empty: all
  int rank = 0;
};

// The rank's [begin, end) inside a global batch of `rows` rows (a last, short batch is split in
// proportion to the shares). Disjoint and covering over ranks.
std::pair<int64_t, int64_t> shard_of(int64_t rows, const LoaderOptions& opt);
int64_t batch_count(int64_t rows, const LoaderOptions& opt);
// The order of the rows in an epoch: identity, or a Fisher-Yates shuffle driven by splitmix64 of
// (seed, epoch) — the same on every platform and every rank.
std::vector<int64_t> epoch_order(int64_t rows, const LoaderOptions& opt, uint64_t epoch);

class BufferPool {
 public:
  Buffer take(size_t bytes);
  void give(Buffer b);

 private:
  std::mutex mutex_;
  std::vector<Buffer> free_;
};

struct Batch {
  std::vector<Buffer> columns;   // one per source: rows * row_bytes
  std::vector<int64_t> indices;  // the source rows gathered, in order
};

class BatchProducer {
 public:
  BatchProducer(std::vector<LoaderSource> sources, LoaderOptions opt, uint64_t epoch, std::shared_ptr<BufferPool> pool);
  ~BatchProducer();
  BatchProducer(const BatchProducer&) = delete;
  BatchProducer& operator=(const BatchProducer&) = delete;
  bool next(Batch& out);  // false at the end of the epoch; rethrows a producer error
  const std::shared_ptr<BufferPool>& pool() const { return pool_; }

 private:
  Batch make(int64_t b);
  void run();

  std::vector<LoaderSource> sources_;
  LoaderOptions opt_;
  std::shared_ptr<BufferPool> pool_;
  std::vector<int64_t> order_;
  int64_t batches_ = 0, rows_ = 0, taken_ = 0;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Batch> ready_;
  bool stop_ = false, finished_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace nexus::data
