// A fixed set of threads running queued tasks: the server's request work
// (JSON parsing, tokenizing, chat templates, building responses) that must
// not run on the HTTP event loop. Tasks never wait on the engine here; they
// are scheduled when engine output is ready.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pagoda::server {

class WorkerPool {
 public:
  explicit WorkerPool(int threads);
  // Runs the tasks still queued, then joins.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void submit(std::function<void()> task);

 private:
  void work();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace pagoda::server
