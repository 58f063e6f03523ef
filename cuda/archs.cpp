#include "archs.h"

#include <charconv>

#include "base/error.h"

#ifndef NEXUS_CUDA_ARCHS
#error "the build passes NEXUS_CUDA_ARCHS, the CUDA architectures it compiles for"
#endif

namespace nexus::cuda {

std::vector<BuildArch> parse_archs(std::string_view list) {
  std::vector<BuildArch> out;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    const std::string_view item = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    if (item.empty()) continue;
    int cc = 0;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), cc);
    const std::string_view rest(end, size_t(item.data() + item.size() - end));
    NX_CHECK(ec == std::errc() && cc > 0 && (rest.empty() || rest == "-real" || rest == "-virtual"),
             "CUDA architecture '", item, "': expected a number such as 80, 80-real or 80-virtual");
    out.push_back({cc, rest != "-real"});
  }
  return out;
}

const std::vector<BuildArch>& build_archs() {
  static const std::vector<BuildArch> archs = parse_archs(NEXUS_CUDA_ARCHS);
  return archs;
}

bool runs_on(const std::vector<BuildArch>& archs, int cc) {
  for (const BuildArch& a : archs) {
    if (a.cc / 10 == cc / 10 && a.cc <= cc) return true;  // SASS of the same major, not newer
    if (a.ptx && a.cc <= cc) return true;                 // PTX the driver compiles forward
  }
  return false;
}

std::string describe(const std::vector<BuildArch>& archs) {
  std::string sass, ptx;
  for (const BuildArch& a : archs) {
    sass += (sass.empty() ? "sm_" : " sm_") + std::to_string(a.cc);
    if (a.ptx) ptx += (ptx.empty() ? "compute_" : " compute_") + std::to_string(a.cc);
  }
  return ptx.empty() ? sass : sass + " + PTX " + ptx;
}

}  // namespace nexus::cuda
