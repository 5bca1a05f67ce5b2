// body(i) for every i in [0, n) on up to maxWorkers of the machine's cores (the
// calling thread is one of them), for independent pieces of work: the harness's
// per-sequence inputs (a large benchmark batch, 64 x 4096 keys, takes seconds
// instead of a minute to prepare) and the ops' kernel warm-up (one compile per
// index).
//
// An exception in any worker (std::bad_alloc on a batch too large for the host) stops
// the others from taking new indices and is rethrown in the caller once all threads
// have joined, never std::terminate.
#pragma once

#include <functional>

namespace attnjit::support {

void parallelFor(int n, const std::function<void(int)>& body, int maxWorkers = 32);

}  // namespace attnjit::support
