// Cross-entropy over logits as one pass per row: the row's shift, log-sum-exp and the
// label's negative log-likelihood forward; softmax minus one-hot, times the row's output
// gradient, backward. Replaces the ~10 broadcast ops the composite took (and their buffers).
#pragma once

#include <cstdint>

namespace nexus::ops::cpu {

// x: (rows, classes) contiguous; labels in [0, classes) (checked by the front end).
// Writes nll[r] = logsumexp(x[r]) - x[r, labels[r]], and the row's log-sum-exp in two parts,
// shift[r] (the row's max) and logsum[r] = log(sum(exp(x[r] - shift[r]))): the backward's
// exp((x - shift) - logsum) then stays exact where x - logsumexp(x) would round (|x| ~ 1000).
template <class T>
void xent_forward(const T* x, const int64_t* labels, int64_t rows, int64_t classes, T* nll, T* shift, T* logsum);

// dx[r, j] = (softmax(x[r])[j] - (j == labels[r])) * g[r * g_stride]
// (g_stride 0: one gradient for every row, as after a sum or mean).
template <class T> void xent_backward(const T* x, const int64_t* labels, const T* shift, const T* logsum, const T* g,
                                      int64_t g_stride, int64_t rows, int64_t classes, T* dx);

}  // namespace nexus::ops::cpu
