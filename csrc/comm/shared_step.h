// SharedStep: the data-parallel step of ranks that share one machine, through one shared-memory
// segment instead of the ring, with the optimizer update sharded among them (ZeRO stage 1 within
// a node).
//
// Why: on one machine the ring moves each gradient through MPI's shared-memory cells (copied in
// by the sender, out by the receiver, in 2(N-1) lock-step exchanges), and then every rank runs the
// whole optimizer update. Here each rank copies its gradient once into its slot of the segment
// (while backward runs, as each one becomes final), the ranks meet once, each reduces and updates
// its own part of the flat parameter vector (its share of the step's samples), reading the N
// slots directly and writing the parameters in place, and the ranks meet again. Per rank that is
// its share of the reduction and of the update (1/N for an even split), one copy of its gradient
// and two waits.
//
// Layout of the segment: a control block (the barrier's counter and futex word, one record per
// rank for the step's counts), then N gradient slots, the parameters, and the optimizer's two
// moment buffers. The parameters and moments live in the segment: from the first sharded step
// every rank's parameter tensors are moved there (Tensor::rebind; the model, its optimizer and
// Python keep their handles) and its optimizer::State points there, so every rank's model, state
// and checkpoint is whole, current and the same, though each rank updates only its part. An
// update outside this step (ops::optim::step, on one rank) first moves that rank's parameters and
// moments back to memory of their own (Storage::shared), and so do the parameters when the step
// is destroyed: no rank writes another's weights outside the step.
//
// The segment is made by rank 0 (shm_open with a random name, posix_fallocate so that a full
// /dev/shm is an error now rather than a SIGBUS later), opened by the others, and unlinked once
// all have it (nothing is left in /dev/shm, even if the job dies). Any rank that cannot open it
// (another machine, a container of its own) makes every rank fall back to the ring: open() is
// collective and returns null on every rank alike.
//
// A wait has the transport's timeout: a rank that died or fell behind makes the others throw
// CommError naming the ranks that did not arrive.
#pragma once

#include <memory>
#include <vector>

#include "comm/transport.h"
#include "ops/optim.h"
#include "tensor/tensor.h"

namespace nexus::comm {

class SharedStep {
 public:
  // What each rank contributes to a step's bookkeeping (DataParallelReducer's counts).
  struct Record {
    double samples = 0, loss_sum = 0, busy = 0, cpu = 0;
  };

  // Collective over `world`: every rank calls it, with or without `wanted`. params: float32 or
  // float64, one dtype, on the host. Null (on every rank) when any rank does not want it, the
  // ranks do not share a machine, the segment would not fit, or any rank fails.
  static std::unique_ptr<SharedStep> open(Transport& world, const std::vector<Tensor>& params, bool wanted,
                                          Timeout timeout);
  ~SharedStep();
  SharedStep(const SharedStep&) = delete;
  SharedStep& operator=(const SharedStep&) = delete;

  // Whether an update with this optimizer and state can be sharded: every moment buffer the
  // optimizer keeps already exists (the first update, which creates them as PyTorch does, runs
  // unsharded) and every parameter has been updated the same number of times.
  static bool can_shard(const ops::optim::Config& c, const ops::optim::State& s, size_t num_params);

  // Parameter p's gradient into this rank's slot (during backward, or after it).
  void copy_in(size_t p, const Tensor& grad);
  // Publishes this rank's record, waits for every rank and returns all records, in rank order.
  std::vector<Record> exchange(const Record& mine);
  // After exchange(): reduces this rank's part of the gradient with `weights` (one per rank: its
  // share of the step's samples, which also sizes the parts), updates that part of the parameters
  // and moments in the segment and waits for every rank; `params` not yet in the segment move
  // there. Increments s.step and every parameter's step count, as the unsharded update would.
  void update(const ops::optim::Config& c, double lr, const std::vector<Tensor>& params,
              const std::vector<double>& weights, ops::optim::State& s);

  // Bytes of the segment.
  size_t bytes() const;

 private:
  struct Mapping;
  SharedStep(std::shared_ptr<Mapping> map, const std::vector<Tensor>& params, int rank, int size, Timeout timeout);
  void barrier(const char* phase);
  // A flat tensor over n elements of the segment at `at` (not owning it).
  Tensor view(void* at, size_t n) const;
  void* slot(int rank) const;
  void bind_state(const ops::optim::Config& c, ops::optim::State& s);
  // The reduced gradient of the flat range [a, b) into this rank's slot.
  void reduce(size_t a, size_t b, const std::vector<double>& weights);
  void bind_params(const std::vector<Tensor>& params);
  // The optimizer update of [a, b) of the segment's parameters (its reduced gradient in this
  // rank's slot).
  void step(size_t a, size_t b, const ops::optim::Config& c, double lr, const ops::optim::State& s);

  std::shared_ptr<Mapping> map_;
  std::vector<std::shared_ptr<Storage>> published_;  // each parameter's place in the segment
  std::vector<Tensor> bound_;                        // parameters moved there (given back on destruction)
  int rank_, size_;
  DType dtype_;
  size_t item_;
  std::vector<size_t> offset_, numel_;  // each parameter's place in the flat vector
  size_t n_ = 0, lo_ = 0, hi_ = 0;      // elements of all parameters; this step's part [lo_, hi_)
  Timeout timeout_;
  uint32_t arrivals_ = 0;  // barriers this rank has passed
};

}  // namespace nexus::comm
