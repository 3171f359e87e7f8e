#include "engine/async_engine.h"

#include "core/error.h"

namespace pagoda {

std::optional<RequestOutput> AsyncEngine::Stream::next(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !queue_.empty() || finished_taken_; })) {
    return std::nullopt;
  }
  if (queue_.empty()) return std::nullopt;
  RequestOutput out = std::move(queue_.front());
  queue_.pop_front();
  if (out.finished) finished_taken_ = true;
  return out;
}

bool AsyncEngine::Stream::done() const {
  std::lock_guard lock(mu_);
  return finished_taken_;
}

bool AsyncEngine::Stream::has_final_output() const {
  std::lock_guard lock(mu_);
  return finished_pushed_;
}

void AsyncEngine::Stream::set_listener(std::function<void()> fn) {
  bool pending;
  {
    std::lock_guard lock(mu_);
    listener_ = fn;
    pending = !queue_.empty();
  }
  if (pending && fn) fn();
}

void AsyncEngine::Stream::keep_latest_only() {
  std::deque<RequestOutput> dropped;  // freed outside the lock
  std::lock_guard lock(mu_);
  while (queue_.size() > 1) {
    dropped.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
}

void AsyncEngine::Stream::push(RequestOutput out) {
  std::function<void()> listener;
  {
    std::lock_guard lock(mu_);
    if (finished_pushed_) return;
    finished_pushed_ = out.finished;
    queue_.push_back(std::move(out));
    listener = listener_;
  }
  cv_.notify_all();
  if (listener) listener();
}

AsyncEngine::AsyncEngine(const std::string& model_dir, const EngineOptions& options)
    : engine_(model_dir, options) {
  stats_ = engine_.stats();
  thread_ = std::thread([this] { loop(); });
}

AsyncEngine::~AsyncEngine() { shutdown(std::chrono::milliseconds(0)); }

std::shared_ptr<AsyncEngine::Stream> AsyncEngine::submit(const std::string& request_id,
                                                         std::vector<int32_t> prompt_ids,
                                                         const SamplingParams& params) {
  engine_.validate_request(prompt_ids, params);
  auto stream = std::make_shared<Stream>();
  {
    std::lock_guard lock(mu_);
    if (!accepting_) throw_input_error("the engine is shutting down");
    if (!streams_.emplace(request_id, stream).second) {
      throw_input_error("duplicate request id '{}'", request_id);
    }
    submissions_.push_back({request_id, std::move(prompt_ids), params});
  }
  cv_.notify_all();
  return stream;
}

void AsyncEngine::abort(const std::string& request_id) {
  {
    std::lock_guard lock(mu_);
    aborts_.push_back(request_id);
  }
  cv_.notify_all();
}

EngineStats AsyncEngine::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

size_t AsyncEngine::num_unfinished() const {
  std::lock_guard lock(mu_);
  return streams_.size();
}

void AsyncEngine::shutdown(std::chrono::milliseconds grace) {
  {
    std::lock_guard lock(mu_);
    if (!thread_.joinable()) return;
    accepting_ = false;
  }
  const auto deadline = Clock::now() + grace;
  while (num_unfinished() > 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, _] : streams_) aborts_.push_back(id);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void AsyncEngine::loop() {
  for (;;) {
    std::vector<Submission> submissions;
    std::vector<std::string> aborts;
    bool stop = false;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] {
        return stopping_ || !submissions_.empty() || !aborts_.empty() || engine_.has_unfinished();
      });
      submissions.swap(submissions_);
      aborts.swap(aborts_);
      stop = stopping_;
    }
    for (Submission& s : submissions) {
      try {
        engine_.add_request(s.id, std::move(s.prompt), s.params);
      } catch (const InputError&) {  // validated in submit(); kept for safety
        RequestOutput out;
        out.request_id = s.id;
        out.finished = true;
        out.finish_reason = FinishReason::Abort;
        std::shared_ptr<Stream> stream;
        {
          std::lock_guard lock(mu_);
          stream = streams_[s.id];
          streams_.erase(s.id);
        }
        if (stream) stream->push(std::move(out));
      }
    }
    for (const std::string& id : aborts) engine_.abort_request(id);

    std::vector<RequestOutput> outputs;
    if (engine_.has_unfinished() || !aborts.empty()) outputs = engine_.step();
    std::vector<std::pair<std::shared_ptr<Stream>, RequestOutput>> deliveries;
    {
      std::lock_guard lock(mu_);
      for (RequestOutput& out : outputs) {
        const auto it = streams_.find(out.request_id);
        if (it == streams_.end()) continue;
        auto stream = it->second;
        if (out.finished) streams_.erase(it);
        deliveries.emplace_back(std::move(stream), std::move(out));
      }
      stats_ = engine_.stats();
    }
    for (auto& [stream, out] : deliveries) stream->push(std::move(out));
    if (stop && !engine_.has_unfinished()) return;
  }
}

}  // namespace pagoda
