#include "comm/loopback_allreduce.h"

#include <algorithm>
#include <exception>
#include <thread>

#include "base/error.h"
#include "comm/loopback_transport.h"

namespace nexus::comm {

namespace {

void check_buffers(const std::vector<RankBuffer>& buffers, const std::vector<Residual*>& res) {
  NX_CHECK(!buffers.empty(), "loopback_allreduce: give one buffer per rank (at least one)");
  for (size_t i = 0; i < buffers.size(); ++i) {
    const RankBuffer& b = buffers[i];
    NX_CHECK_TYPE(b.dtype == DType::Float32 || b.dtype == DType::Float64, "loopback_allreduce: rank ", i,
                  "'s buffer is ", dtype_name(b.dtype), "; valid dtypes: float32, float64");
    NX_CHECK_TYPE(b.dtype == buffers[0].dtype, "loopback_allreduce: rank ", i, "'s buffer is ", dtype_name(b.dtype),
                  " but rank 0's is ", dtype_name(buffers[0].dtype));
    NX_CHECK(b.n == buffers[0].n, "loopback_allreduce: rank ", i, "'s buffer has ", b.n, " elements but rank 0's has ",
             buffers[0].n);
  }
  NX_CHECK(res.empty() || res.size() == buffers.size(), "loopback_allreduce: ", res.size(), " residuals for ",
           buffers.size(), " ranks; give none or one per rank");
}

AllReduceStats run_rank(Transport& t, const RankBuffer& b, AllReduceOptions opts, Residual* r) {
  opts.residual = r;
  if (b.dtype == DType::Float64) return ring_allreduce(t, static_cast<double*>(b.data), b.n, opts);
  return ring_allreduce(t, static_cast<float*>(b.data), b.n, opts);
}

}  // namespace

std::vector<AllReduceStats> loopback_allreduce(const std::vector<RankBuffer>& buffers, const AllReduceOptions& opts,
                                               const std::vector<Residual*>& residuals,
                                               const std::vector<int>& absent) {
  check_buffers(buffers, residuals);
  const int size = int(buffers.size());
  auto hub = std::make_shared<Hub>(size);
  std::vector<AllReduceStats> stats(size);
  std::vector<std::exception_ptr> errors(size);
  std::vector<std::string> messages(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    if (std::find(absent.begin(), absent.end(), r) != absent.end()) continue;
    threads.emplace_back([&, r] {
      try {
        LoopbackTransport t(hub, r);
        stats[r] = run_rank(t, buffers[r], opts, residuals.empty() ? nullptr : residuals[r]);
      } catch (const std::exception& e) {
        errors[r] = std::current_exception();
        messages[r] = e.what();
        hub->abort(r, e.what());
      }
    });
  }
  for (std::thread& th : threads) th.join();

  std::string combined;
  int failed = 0;
  for (int r = 0; r < size; ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const CommError&) {
      ++failed;
      combined += str("\n  rank ", r, ": ", messages[r]);
    } catch (...) {
      throw;  // a user error (bad codec, bad residual size) is reported as itself
    }
  }
  if (failed) throw CommError(str("loopback all-reduce failed on ", failed, " of ", size, " ranks:", combined));
  return stats;
}

}  // namespace nexus::comm
