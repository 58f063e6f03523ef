// Program: a FusedKernel ready to run. It resolves the iteration shape from its inputs at run
// time, picks the variant for the inputs' innermost-dimension access (compiled once per variant
// through the cache, or interpreted), and splits the work over the thread pool.
//
// This is the entry point for anything that runs fused kernels (the engine's executor, which runs
// nx.jit traces too): get_program(lower(graph, group)) once, then program->run(inputs, consts).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "codegen/fused_kernel.h"
#include "codegen/render.h"
#include "tensor/tensor.h"

namespace nexus::codegen {

struct ProgramStats {
  int64_t compiles = 0;    // variants compiled by this process
  int64_t cache_hits = 0;  // variants loaded from the disk cache
  double compile_seconds = 0;
  int64_t interpreted = 0;  // variants run by the interpreter
};

class Program {
 public:
  explicit Program(FusedKernel k);

  const FusedKernel& kernel() const { return kernel_; }
  const std::string& name() const { return name_; }

  // Runs on `inputs` (any strides; shapes broadcast to the iteration shape) with the constant
  // slot values `consts`; returns the kernel's outputs, contiguous. When an input is on a device
  // the kernel runs there, as its CUDA dialect launched by the device's backend (host scalars
  // among the inputs are copied over); only kernels for which runs_on_device() holds can.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const std::vector<double>& consts);

  // The source of the variant for `access` (all Contig when empty), in `d`.
  std::string source(Dialect d, std::vector<Access> access = {}) const;
  // The cache key of that variant for the current compiler and flags.
  std::string key(const std::vector<Access>& access) const;
  // The key of its CUDA dialect (the backend adds the device's architecture and NVRTC's version).
  std::string cuda_key(const std::vector<Access>& access) const;
  ProgramStats stats() const;

 private:
  using Fn = void*;
  Fn variant(const std::vector<Access>& access);  // nullptr: interpret
  Shape iteration_shape(const std::vector<Tensor>& inputs, const std::vector<double>& consts) const;
  // The three kinds of kernel, on the iteration shape and each input's strides over it.
  std::vector<Tensor> run_elementwise(const std::vector<Tensor>& inputs, const std::vector<double>& consts,
                                      const Shape& shape, std::vector<std::vector<int64_t>> st);
  std::vector<Tensor> run_reduce(const std::vector<Tensor>& inputs, const std::vector<double>& consts,
                                 const Shape& shape, std::vector<std::vector<int64_t>> st);
  // An elementwise kernel on the inputs' device, as one launch (render.h: CudaArgs).
  std::vector<Tensor> run_device(const std::vector<Tensor>& inputs, const std::vector<double>& consts, Device device);
  // A reduction with side outputs (a floating sum or mean over leading axes), row by row.
  std::vector<Tensor> run_rows(const std::vector<Tensor>& inputs, const std::vector<double>& consts, const Shape& shape,
                               std::vector<std::vector<int64_t>> st);

  FusedKernel kernel_;
  std::string name_;
  mutable std::mutex mu_;
  std::map<std::pair<std::vector<Access>, bool>, Fn> variants_;  // (access, compiled?)
  ProgramStats stats_;
};

// Whether a device can run `k` as one generated kernel: elementwise (no reduction; those run node
// by node on a device), with at most kMaxKernelArgs inputs + outputs and constant slots.
bool runs_on_device(const FusedKernel& k);

// One Program per kernel structure in this process, so identical subgraphs share their
// compiled variants.
std::shared_ptr<Program> get_program(const FusedKernel& k);

}  // namespace nexus::codegen
