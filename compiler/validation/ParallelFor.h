// body(i) for every i in [0, n) on up to 32 of the machine's cores, for the harness's
// per-sequence work (random inputs, cache encoding), which is independent across
// sequences: a large benchmark batch (64 x 4096 keys, half a billion values) takes
// seconds instead of a minute to prepare.
//
// An exception in any worker (std::bad_alloc on a batch too large for the host) stops
// the others from taking new indices and is rethrown in the caller once all threads
// have joined, never std::terminate.
#pragma once

#include <functional>

namespace attnjit::validation {

void parallelFor(int n, const std::function<void(int)>& body);

}  // namespace attnjit::validation
