// Every NEXUS_* environment knob, declared and parsed once (env.cpp) and shown by `nexus info`.
// Nothing else reads a NEXUS_* variable: C++ calls the typed getters below, Python calls them
// through _C.knob_value (python/nexus/config.py). A bad value is a ValueError naming the knob,
// the value and what is valid. The environment is read on every call (tests change it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace nexus {

enum class KnobKind {
  Bool,        // 1/0, true/false, yes/no, on/off, any case
  Int,         // a decimal integer in [min, max]
  Seconds,     // a finite number > 0
  Text,        // any string (a path, a library name)
  CxxFlags,    // compiler flags; ones that change floating-point results are refused
  CpuVariant,  // auto, or a CPU variant the build carries and this CPU runs (base/cpu_variant.h)
};

struct Knob {
  const char* name;
  const char* default_value;  // "" when the default is computed (e.g. the core count)
  const char* description;
  KnobKind kind = KnobKind::Text;
  int64_t min = 0, max = 0;  // for Int
};

const std::vector<Knob>& knobs();

// The knob's text from the environment when set and non-empty, else its default, after it has
// been checked against the knob's kind. Unknown names are an internal error.
std::string knob(const char* name);
bool knob_bool(const char* name);
// nullopt when neither the environment nor the default gives a value.
std::optional<int64_t> knob_int(const char* name);
double knob_seconds(const char* name);

// The parsed value as its kind's type (monostate where knob_int gives nullopt), for Python;
// an unknown name is a ValueError listing the knobs.
using KnobValue = std::variant<std::monostate, bool, int64_t, double, std::string>;
KnobValue knob_value(const std::string& name);

// Compiler flags as the words the compiler gets: split on whitespace, no shell quoting.
std::vector<std::string> split_flags(const std::string& flags);

}  // namespace nexus
