#include "server/generation_reply.h"

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>

namespace pagoda::server {

namespace {

// One SSE response. Held by the pool task in progress and by the Reply's
// cancel callback; the engine streams' listeners hold it weakly (a strong
// reference would cycle through the streams it owns).
class EventPump : public std::enable_shared_from_this<EventPump> {
 public:
  EventPump(GenerationContext& ctx, WorkerPool& pool, Submitted sub, Reply reply)
      : pool_(pool), events_(ctx, std::move(sub)), reply_(reply) {}

  void schedule() {
    if (scheduled_.exchange(true)) return;  // a run is queued and will see this output
    pool_.submit([self = shared_from_this()] { self->run(); });
  }

  void run() {
    scheduled_ = false;  // before reading: output pushed from now on schedules again
    std::lock_guard lock(mu_);
    if (ended_) return;
    bool finished = false;
    std::string data = events_.next_events(&finished, std::chrono::milliseconds(0));
    if (!data.empty()) reply_.write(std::move(data));
    if (finished) {
      ended_ = true;
      reply_.end();
    }
  }

  void cancel() {
    std::lock_guard lock(mu_);
    if (ended_) return;
    ended_ = true;
    events_.abort_all("client disconnected");
  }

 private:
  WorkerPool& pool_;
  std::mutex mu_;  // next_events and abort_all are not thread-safe
  EventStream events_;
  Reply reply_;
  std::atomic<bool> scheduled_{false};
  bool ended_ = false;
};

// One non-streaming response.
class Completion : public std::enable_shared_from_this<Completion> {
 public:
  Completion(GenerationContext& ctx, WorkerPool& pool, Submitted sub, Reply reply,
             std::function<HttpResponse(const nlohmann::json&)> to_response)
      : ctx_(ctx),
        pool_(pool),
        sub_(std::move(sub)),
        reply_(reply),
        to_response_(std::move(to_response)) {}

  // Stream i has new output (engine thread): keep only its newest output,
  // and answer once every choice has its final one.
  void on_output(size_t i) {
    const auto& stream = sub_.streams[i];
    stream->keep_latest_only();
    if (!stream->has_final_output() || counted_[i].exchange(true)) return;
    if (finished_.fetch_add(1) + 1 < sub_.streams.size()) return;
    if (fired_.exchange(true)) return;  // cancelled
    pool_.submit([self = shared_from_this()] {
      // Every final output is queued, so this does not wait.
      self->reply_.send(self->to_response_(collect_response(self->ctx_, self->sub_)));
    });
  }

  void cancel() {
    if (fired_.exchange(true)) return;  // finished anyway
    for (size_t i = 0; i < sub_.streams.size(); ++i) {
      if (sub_.streams[i]->has_final_output()) continue;
      ctx_.engine.abort(sub_.request_ids[i]);
      ctx_.metrics.record_aborted();
      std::fprintf(stderr, "pagoda: request %s aborted: client disconnected\n",
                   sub_.request_ids[i].c_str());
    }
  }

 private:
  GenerationContext& ctx_;
  WorkerPool& pool_;
  Submitted sub_;
  Reply reply_;
  std::function<HttpResponse(const nlohmann::json&)> to_response_;
  std::unique_ptr<std::atomic<bool>[]> counted_ { new std::atomic<bool>[ sub_.streams.size() ]() };
  std::atomic<size_t> finished_{0};
  std::atomic<bool> fired_{false};
};

}  // namespace

void reply_with_events(GenerationContext& ctx, WorkerPool& pool, Submitted sub, Reply reply) {
  auto streams = sub.streams;
  auto pump = std::make_shared<EventPump>(ctx, pool, std::move(sub), reply);
  reply.start_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
  reply.on_cancel([pump] { pump->cancel(); });
  std::weak_ptr<EventPump> weak = pump;
  for (const auto& s : streams) {
    s->set_listener([weak] {
      if (auto p = weak.lock()) p->schedule();
    });
  }
  pump->schedule();
}

void reply_when_complete(GenerationContext& ctx, WorkerPool& pool, Submitted sub, Reply reply,
                         std::function<HttpResponse(const nlohmann::json&)> to_response) {
  auto streams = sub.streams;
  auto done =
      std::make_shared<Completion>(ctx, pool, std::move(sub), reply, std::move(to_response));
  reply.on_cancel([done] { done->cancel(); });
  std::weak_ptr<Completion> weak = done;
  for (size_t i = 0; i < streams.size(); ++i) {
    // Fires at once if output is already queued.
    streams[i]->set_listener([weak, i] {
      if (auto d = weak.lock()) d->on_output(i);
    });
  }
}

}  // namespace pagoda::server
