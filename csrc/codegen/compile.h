// The host C++ compiler for generated kernels and the on-disk kernel cache.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nexus::codegen {

struct Compiler {
  bool found = false;
  std::vector<std::string> command;  // $CXX (split on spaces) or c++, resolved on PATH
  std::string identity;              // the full `--version` output (part of every key)
  std::string flags;                 // NEXUS_JIT_CXXFLAGS
  std::string target;                // the macros the flags predefine here (the resolved -march)
  std::string describe() const;      // "/usr/bin/c++ (c++ (Debian 12.2.0) 12.2.0)" or why not found
  std::string why_not;               // when !found
};

// The compiler named by $CXX (default c++), looked up once per distinct $CXX value.
const Compiler& host_compiler();
// The flags every kernel is compiled with: NEXUS_JIT_CXXFLAGS plus the fixed ones.
std::string full_flags(const Compiler& c);
// True when fused kernels are compiled (NEXUS_JIT != 0 and a compiler is found); otherwise the
// interpreter runs them. Reads the environment on every call.
bool jit_enabled();
// Compiles `src_path` into the shared object `out_path`; throws ValueError with the compiler's
// output when it fails.
void compile_shared(const Compiler& c, const std::string& src_path, const std::string& out_path);
// Whether `c` reads a precompiled header found beside a header a source includes (GCC's .gch):
// then the kernels share one parse of their prelude (compile_header).
bool takes_precompiled_headers(const Compiler& c);
// Compiles the header `header_path` into the precompiled header `out_path`, with the flags the
// kernels are compiled with (a precompiled header made with others is not used); ValueError
// with the compiler's output when it fails.
void compile_header(const Compiler& c, const std::string& header_path, const std::string& out_path);

// ---- the cache: <dir>/<key>.so (+ .cpp, the source it was built from), 0600 in a 0700 dir ---
std::string cache_dir();  // NEXUS_CACHE_DIR, else $XDG_CACHE_HOME/nexus, else ~/.cache/nexus

struct CacheStats {
  int64_t compiles = 0;  // kernels compiled by this process
  int64_t hits = 0;      // kernels loaded from the disk cache
  int64_t rebuilt = 0;   // entries that failed to load or verify and were rebuilt
  double compile_seconds = 0;
};
CacheStats cache_stats();  // process-wide totals

struct Loaded {
  void* fn = nullptr;  // the entry point
  bool compiled = false;
  double seconds = 0;
};
// Returns the entry point `symbol` of the binary for `key`, from the cache or compiled from
// `source` (under a per-key flock, written by temp file + rename). An entry that does not load,
// or whose embedded nx_key differs from `key`, is rebuilt. `prelude`: text that `source` holds
// before its own code and every kernel shares; compilers that take precompiled headers parse it
// once per cache (<dir>/prelude-<hash>.h.gch) instead of once per kernel.
Loaded load_or_build(const std::string& key, const std::string& symbol, const std::string& source,
                     const std::string& prelude = "");

}  // namespace nexus::codegen
