// Runs an LLMEngine loop on its own thread so other threads (the server's
// request handlers) can submit, stream and abort requests concurrently.
// Every request gets a Stream its caller pulls outputs from; the engine
// thread never waits for a slow consumer.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/llm_engine.h"

namespace pagoda {

class AsyncEngine {
 public:
  // Outputs of one request, in order; the last one has finished == true.
  class Stream {
   public:
    // Waits up to `timeout` for the next output; nullopt on timeout or once
    // the final output has been taken.
    std::optional<RequestOutput> next(std::chrono::milliseconds timeout);
    bool done() const;
    // True once the final output is queued (taken or not).
    bool has_final_output() const;
    // `fn` runs after every output is queued, on the engine thread with no
    // lock held, so an event-driven consumer is woken instead of polling; it
    // must be quick (post work elsewhere). If outputs are already queued when
    // it is set, it runs at once on the caller's thread.
    void set_listener(std::function<void()> fn);
    // Drops every queued output but the newest. Outputs are cumulative (all
    // text and ids so far), so a consumer that wants only the end result
    // calls this as outputs arrive and keeps its memory flat.
    void keep_latest_only();

   private:
    friend class AsyncEngine;
    void push(RequestOutput out);
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<RequestOutput> queue_;
    bool finished_pushed_ = false;
    bool finished_taken_ = false;
    std::function<void()> listener_;
  };

  AsyncEngine(const std::string& model_dir, const EngineOptions& options);
  // Aborts whatever is still running and joins the engine thread.
  ~AsyncEngine();
  AsyncEngine(const AsyncEngine&) = delete;
  AsyncEngine& operator=(const AsyncEngine&) = delete;

  // Validates in the caller's thread (throws InputError) and queues the
  // request for the engine thread. Ids must be unique among live requests.
  std::shared_ptr<Stream> submit(const std::string& request_id, std::vector<int32_t> prompt_ids,
                                 const SamplingParams& params);
  // Aborts a request (no-op if it already finished); its stream then ends
  // with finish_reason Abort and its KV blocks are freed on the next step.
  void abort(const std::string& request_id);

  // Stops accepting work; lets running requests finish for up to `grace`,
  // then aborts the rest and stops the engine thread.
  void shutdown(std::chrono::milliseconds grace);

  EngineStats stats() const;
  size_t num_unfinished() const;
  const Tokenizer& tokenizer() const { return engine_.tokenizer(); }
  const LLMEngine& engine() const { return engine_; }  // immutable parts only

 private:
  struct Submission {
    std::string id;
    std::vector<int32_t> prompt;
    SamplingParams params;
  };
  void loop();

  LLMEngine engine_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Submission> submissions_;
  std::vector<std::string> aborts_;
  std::unordered_map<std::string, std::shared_ptr<Stream>> streams_;
  EngineStats stats_;
  bool stopping_ = false;
  bool accepting_ = true;
  std::thread thread_;
};

}  // namespace pagoda
