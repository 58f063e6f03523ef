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
  // slot values `consts`; returns the kernel's outputs, contiguous.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const std::vector<double>& consts);

  // The source of the variant for `access` (all Contig when empty), in `d`.
  std::string source(Dialect d, std::vector<Access> access = {}) const;
  // The cache key of that variant for the current compiler and flags.
  std::string key(const std::vector<Access>& access) const;
  ProgramStats stats() const;

 private:
  using Fn = void*;
  Fn variant(const std::vector<Access>& access);  // nullptr: interpret
  Shape iteration_shape(const std::vector<Tensor>& inputs, const std::vector<double>& consts) const;
  // The three kinds of kernel, on the iteration shape and each input's strides over it.
  std::vector<Tensor> run_elementwise(const std::vector<Tensor>& inputs, const std::vector<double>& consts,
                                      const Shape& shape, std::vector<std::vector<int64_t>> st);
  std::vector<Tensor> run_reduce(const std::vector<Tensor>& inputs, const std::vector<double>& consts,
                                 const Shape& shape, const std::vector<std::vector<int64_t>>& st);
  // A reduction with side outputs (a floating sum or mean over leading axes), row by row.
  std::vector<Tensor> run_rows(const std::vector<Tensor>& inputs, const std::vector<double>& consts, const Shape& shape,
                               std::vector<std::vector<int64_t>> st);

  FusedKernel kernel_;
  std::string name_;
  mutable std::mutex mu_;
  std::map<std::pair<std::vector<Access>, bool>, Fn> variants_;  // (access, compiled?)
  ProgramStats stats_;
};

// One Program per kernel structure in this process, so identical subgraphs share their
// compiled variants.
std::shared_ptr<Program> get_program(const FusedKernel& k);

}  // namespace nexus::codegen
