// Freed memory that queued work may still read: both allocators (allocator.h, pinned.h) hold such
// a block back, with the events recorded after that work, and return it to their cache once every
// event has completed.
#pragma once

#include <cuda_runtime_api.h>

#include <utility>
#include <vector>

#include "device_guard.h"

namespace nexus::cuda {

// Blocks (a pointer and the allocator's Block) each waiting for its events.
template <class Block> class PendingBlocks {
 public:
  bool empty() const { return entries_.empty(); }

  // ptr waits for `events` (which this takes over) before it is reused.
  void add(void* ptr, Block block, std::vector<cudaEvent_t> events) {
    entries_.push_back({ptr, std::move(block), std::move(events)});
  }

  // ready(ptr, block) for every block whose events have all completed, after which they are
  // destroyed. With wait, the blocks that waited_on(block) selects are waited for first, so they
  // are all ready. DeviceError when an event reports a failure of the work before it.
  template <class Select, class Ready> void collect(bool wait, const Select& waited_on, const Ready& ready) {
    std::vector<Entry> still;
    for (Entry& e : entries_) {
      bool done = true;
      if (wait && waited_on(e.block)) {
        for (cudaEvent_t ev : e.events) check(cudaEventSynchronize(ev), "cudaEventSynchronize");
      } else {
        for (cudaEvent_t ev : e.events) {
          if (!event_done(ev)) {
            done = false;
            break;
          }
        }
      }
      if (!done) {
        still.push_back(std::move(e));
        continue;
      }
      for (cudaEvent_t ev : e.events) (void)cudaEventDestroy(ev);
      ready(e.ptr, e.block);
    }
    entries_ = std::move(still);
  }

 private:
  struct Entry {
    void* ptr;
    Block block;
    std::vector<cudaEvent_t> events;
  };
  std::vector<Entry> entries_;
};

}  // namespace nexus::cuda
