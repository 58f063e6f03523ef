// Ring all-reduce (Baidu/Horovod/Gloo ring): reduce-scatter then all-gather over a Transport.
//
// Vocabulary (STYLE, from Gloo): the buffer of n elements is cut into `size` chunks, one per rank
// (chunk c = elements [c*n/size, (c+1)*n/size), sizes differ by at most one, possibly 0); every
// chunk is cut into the same number K of segments, the pipelined unit, each at most
// segment_bytes of uncompressed data.
//
// Reduce-scatter, N-1 steps: at step s rank r sends chunk (r-s) to rank r+1 and adds chunk
// (r-s-1) received from rank r-1; afterwards rank r owns the full sum of chunk (r+1). Pipelined
// per segment: the send of segment j for step s+1 is posted as soon as segment j of step s has
// been reduced, so segments j+1.. are still on the wire (and being encoded) while j is reduced.
// All-gather, N-1 steps: the owner encodes its reduced chunk once (after scaling for "mean") and
// the encoded bytes travel round the ring unchanged; every rank, the owner included, decodes
// the same bytes, so all ranks end with bit-identical buffers and no codec error compounds in
// this phase. Lossy codecs therefore compress on the wire in both phases: in reduce-scatter each
// hop encodes its partial sum, in all-gather the owner's result is encoded once.
//
// Error feedback: with a Residual the size of the buffer, every encoding this rank does adds the
// residual first (each element is encoded once per all-reduce on each rank; see error_feedback.h).
// A world of one sends nothing and applies no codec.
//
// Top-k is the exception: re-sparsifying every hop's partial sum lost accuracy as ranks grew
// (-1.39 points on digits at 4 ranks), so "topk:RATIO" runs as a sparse all-gather instead:
// each rank encodes its own buffer (plus residual) at RATIO / N per segment, the messages go
// round the ring unchanged, and every rank adds all N in rank order (bit-identical everywhere).
//
// Exactness: with codec "none", each element of the result is the sum of the inputs in ring order
// starting at the owner's left neighbour; inputs whose sum is exact in float32/64 (small
// integers, dyadic values) give the naive sum bit for bit, on every rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "base/reduce_op.h"
#include "comm/codec.h"
#include "comm/error_feedback.h"
#include "comm/transport.h"
#include "tensor/dtype.h"

namespace nexus::comm {

// Segment size in uncompressed bytes. Tests override it (a few bytes) to force many segments.
inline constexpr size_t kMaxSegmentBytes = size_t(512) << 10;
// NEXUS_COMM_TIMEOUT (base/env.cpp declares it and its default): how long any one wait may take.
Timeout default_timeout();
// Tags of the two phases (well under MPI's guaranteed MPI_TAG_UB of 32767).
inline constexpr int kTagReduceScatter = 0x4e01;
inline constexpr int kTagAllGather = 0x4e02;

struct AllReduceOptions {
  // One of kReductions (else a ValueError). Max and Min are elementwise over the ranks (a NaN on
  // any rank wins, as numpy.maximum); they take a lossless codec only (a lossy one would change
  // which value wins).
  ReduceOp op = ReduceOp::Sum;
  std::shared_ptr<const Codec> codec;  // null: "none"
  Residual* residual = nullptr;        // error feedback for lossy codecs (size n), optional
  size_t segment_bytes = kMaxSegmentBytes;
  Timeout timeout = default_timeout();  // for every single wait
};

struct AllReduceStats {
  uint64_t bytes_sent = 0;          // this rank, on the wire (encoded)
  uint64_t bytes_uncompressed = 0;  // what this rank would send with codec "none"
  double seconds = 0;               // wall time of the call on this rank
};

// In place; every rank calls it with the same n, options and dtype. float64 takes codec "none".
AllReduceStats ring_allreduce(Transport& t, float* data, size_t n, const AllReduceOptions& opts);
AllReduceStats ring_allreduce(Transport& t, double* data, size_t n, const AllReduceOptions& opts);
// The two phases on their own, float32 and float64 sums only (the hierarchical reduction runs a
// reduction across groups between them). After ring_reduce_scatter this rank holds the sum over
// the ranks of its chunk, ring_owned_chunk, and the rest of the buffer is spent; ring_all_gather
// then gives every rank every rank's chunk. Each is the matching half of ring_allreduce, with its
// codec and Residual (each element is encoded once over the two), except top-k (a ValueError:
// it reduces by all-gather, not in phases).
struct RingChunk {
  size_t off = 0, len = 0;
};
RingChunk ring_owned_chunk(size_t n, int size, int rank);
AllReduceStats ring_reduce_scatter(Transport& t, void* data, DType dtype, size_t n, const AllReduceOptions& opts);
AllReduceStats ring_all_gather(Transport& t, void* data, DType dtype, size_t n, const AllReduceOptions& opts);

// Any floating dtype (ring_dtypes.cpp). float16 and bfloat16 are widened to float32 for the adds;
// with codec "none" they travel in their own 16-bit format (each hop rounds its partial sum to
// the buffer's dtype, as a ring in that dtype would, and no Residual is used), while a lossy codec
// encodes the widened values. bytes_uncompressed counts the buffer's own element size. Other
// dtypes are a TypeError.
AllReduceStats ring_allreduce(Transport& t, void* data, DType dtype, size_t n, const AllReduceOptions& opts);

}  // namespace nexus::comm
