#include "device/backend.h"

#include <atomic>

#include "base/error.h"

namespace nexus::device {
namespace {

std::atomic<Backend*> g_cuda{nullptr};

}  // namespace

void register_backend(DeviceType type, Backend* backend) {
  NX_ASSERT(type == DeviceType::CUDA, "only CUDA registers a backend");
  g_cuda.store(backend);
}

bool has_backend(DeviceType type) { return type == DeviceType::CUDA && g_cuda.load() != nullptr; }

Backend& backend(Device device) {
  NX_ASSERT(!device.is_cpu(), "the host has no registered backend");
  Backend* b = g_cuda.load();
  if (!b)
    throw DeviceError(str("cannot use ", device.str(), ": this installation of nexus has no CUDA backend (it was ",
                          "built without a CUDA toolkit; `nexus info` shows the build): reinstall where nvcc is ",
                          "on PATH"));
  b->check_device(device.index);
  return *b;
}

}  // namespace nexus::device
