// The gradient-ready hook that nexus._C_mpi hands to CompiledModel.forward_backward in nexus._C:
// a PyCapsule named kGradReadyCapsule around plain C, so neither extension calls into the other
// one's copy of the core (each links its own).
#pragma once

#include <cstddef>
#include <cstdint>

namespace nexus::python {

inline constexpr const char* kGradReadyCapsule = "nexus.grad_ready";

struct GradReadyHook {
  // Called on the thread running backward, as soon as parameter `param`'s gradient is final:
  // `data` points at its `numel` contiguous elements.
  void (*fn)(void* ctx, size_t param, void* data, int64_t numel);
  void* ctx;
};

}  // namespace nexus::python
