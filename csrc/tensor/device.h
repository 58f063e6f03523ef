// Where a tensor's storage lives: the host, or one CUDA device. Printed and parsed as PyTorch
// spells it ("cpu", "cuda", "cuda:1").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace nexus {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // the device's ordinal (always 0 for the host)

  static constexpr Device cpu() { return {}; }
  static constexpr Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "cuda:0"
};

// "cpu", "cuda", "cuda:N"; ValueError naming what would be valid otherwise.
Device parse_device(std::string_view text);

}  // namespace nexus
