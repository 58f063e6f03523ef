// The Transport over MPI point-to-point (MPI_Isend / MPI_Irecv / MPI_Test / MPI_Cancel), and the
// few other MPI calls the _C_mpi extension needs. This header does not include <mpi.h>: a
// communicator crosses as its Fortran handle (mpi4py's comm.py2f()), and mpi_transport.cpp, the
// only file that includes <mpi.h>, turns it back with MPI_Comm_f2c. Linked only into _C_mpi.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "comm/transport.h"

namespace nexus::comm {

class MpiTransport final : public Transport {
 public:
  // Duplicates the communicator (a collective call on all its ranks), so the ring's messages
  // never match the application's own; errors on the duplicate return codes instead of aborting.
  explicit MpiTransport(int64_t fortran_comm);
  ~MpiTransport() override;
  MpiTransport(const MpiTransport&) = delete;
  MpiTransport& operator=(const MpiTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Request isend(int peer, const void* data, size_t bytes, int tag) override;
  Request irecv(int peer, void* data, size_t capacity, int tag) override;
  size_t wait(Request& req, Timeout timeout) override;
  bool test(Request& req, size_t* bytes = nullptr) override;
  void cancel(Request& req) override;

  // In the background (a thread reducing while backward computes on the same cores), waits
  // sleep between polls instead of yielding: a yielding thread is always runnable and would
  // take half of a core the computation needs.
  void set_background(bool on) override { background_ = on; }

 private:
  struct Op;
  Op& op(const Request& req);
  std::string describe(const Op& op) const;
  bool poll(int64_t id, Op& op, size_t* bytes);  // one MPI_Test; true (and op erased) when done

  struct Impl;  // holds the MPI_Comm (an MPI type) out of this header
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, size_ = 1;
  int64_t next_id_ = 0;
  bool background_ = false;
  std::unordered_map<int64_t, std::unique_ptr<Op>> ops_;
};

// "MPICH 5.0.2 (...)": the first line of MPI_Get_library_version, for `nexus info`.
std::string mpi_library_version();
// Whether MPI_Init has run and MPI_Finalize has not (mpi4py initialises MPI when imported).
bool mpi_active();
// MPI_Abort on MPI_COMM_WORLD: ends every rank of the job (used by nexus.distributed's
// excepthook after it printed which rank failed and why). Does not return.
[[noreturn]] void mpi_abort(int code);

}  // namespace nexus::comm
