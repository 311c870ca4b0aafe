// Runs fn(task) for task in [0, num_tasks) on all hardware threads; returns when every task is done.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace jax_fa4::cpu {

template <typename Fn>
void parallel_for(int64_t num_tasks, Fn&& fn) {
  if (num_tasks <= 0) return;
  const int64_t hw = std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
  const int64_t num_threads = std::min(hw, num_tasks);
  std::atomic<int64_t> next{0};
  // Dynamic hand-out: causal tasks differ in cost, so a static split would leave a core idle.
  auto worker = [&]() {
    for (int64_t t = next.fetch_add(1); t < num_tasks; t = next.fetch_add(1)) fn(t);
  };
  std::vector<std::thread> threads;
  threads.reserve(num_threads - 1);
  for (int64_t i = 1; i < num_threads; ++i) threads.emplace_back(worker);
  worker();
  for (auto& th : threads) th.join();
}

}  // namespace jax_fa4::cpu
