#include "support/ParallelFor.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace attnjit::support {

void parallelFor(int n, const std::function<void(int)>& body, int maxWorkers) {
  if (n <= 0) return;
  const int workers =
      std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, std::max(1, std::min(n, maxWorkers)));
  std::atomic<int> next{0};
  std::mutex failureMutex;
  std::exception_ptr failure;
  auto work = [&] {
    try {
      for (int i = next++; i < n; i = next++) body(i);
    } catch (...) {
      next = n;  // no new indices for the other workers
      std::lock_guard<std::mutex> lock(failureMutex);
      if (!failure) failure = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (int i = 1; i < workers; ++i) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace attnjit::support
