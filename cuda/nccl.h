// NCCL, loaded at run time (libnccl.so.2 from the nvidia-nccl wheel matching the CUDA major
// version, `pip install ".[cuda]"`, or the system's): the CUDA backend's device::Collective, so
// data-parallel ranks on GPUs sum their gradients GPU to GPU (NVLink, PCIe, InfiniBand: whatever
// NCCL finds) instead of through host copies and the MPI ring.
#pragma once

#include <memory>
#include <string>

#include "device/backend.h"

namespace nexus::cuda {

// Why NCCL cannot be used in this process ("" when it can): the library is missing or too old.
std::string nccl_unavailable();
// NCCL's version as "2.27.3" ("none" when it is not loaded).
std::string nccl_version();
// ncclGetUniqueId's 128 bytes.
std::string nccl_unique_id();
// ncclCommInitRank on device `index`: returns when all `size` processes have joined.
std::unique_ptr<device::Collective> make_nccl_collective(const std::string& id, int size, int rank, int index);

}  // namespace nexus::cuda
