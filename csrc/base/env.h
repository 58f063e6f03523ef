// Every NEXUS_* environment knob, declared once (env.cpp) and shown by `nexus info`.
#pragma once

#include <string>
#include <vector>

namespace nexus {

struct Knob {
  const char* name;
  const char* default_value;
  const char* description;
};

const std::vector<Knob>& knobs();
// The knob's value from the environment, or its default. Unknown names are an internal error.
std::string knob(const char* name);

}  // namespace nexus
