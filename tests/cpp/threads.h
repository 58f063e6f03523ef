// The pool size for one scope (base/thread_pool.h): tests that must see large loops split over
// several workers set it, and the size before comes back at the end of the scope.
#pragma once

#include "base/thread_pool.h"

namespace nexus::test {

struct Threads {
  int saved = num_threads();
  explicit Threads(int n) { set_num_threads(n); }
  ~Threads() { set_num_threads(saved); }
  Threads(const Threads&) = delete;
  Threads& operator=(const Threads&) = delete;
};

}  // namespace nexus::test
