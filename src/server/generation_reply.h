// Connects a submitted generation to its HTTP Reply without a thread per
// request: the engine streams' listeners schedule work on the WorkerPool
// when output is ready, which writes server-sent events (or, once every
// choice has finished, the whole JSON response). If the client goes away
// the Reply's cancel callback aborts every unfinished choice.
#pragma once

#include "server/generation.h"
#include "server/http_transport.h"
#include "server/worker_pool.h"

namespace pagoda::server {

// Streams `sub` as server-sent events on `reply`.
void reply_with_events(GenerationContext& ctx, WorkerPool& pool, Submitted sub, Reply reply);

// Answers `reply` with the whole response once every choice of `sub` has
// finished.
void reply_when_complete(GenerationContext& ctx, WorkerPool& pool, Submitted sub, Reply reply,
                         std::function<HttpResponse(const nlohmann::json&)> to_response);

}  // namespace pagoda::server
