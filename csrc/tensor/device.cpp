#include "tensor/device.h"

#include <charconv>

#include "base/error.h"

namespace nexus {

std::string Device::str() const { return type == DeviceType::CPU ? "cpu" : "cuda:" + std::to_string(index); }

Device parse_device(std::string_view text) {
  auto bad = [&] {
    return ValueError(nexus::str("unknown device '", text, "'; valid: 'cpu', 'cuda', 'cuda:N' (N >= 0)"));
  };
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (!text.starts_with("cuda:")) throw bad();
  std::string_view digits = text.substr(5);
  int index = -1;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || index < 0) throw bad();
  return Device::cuda(index);
}

}  // namespace nexus
