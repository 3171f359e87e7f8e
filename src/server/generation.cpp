#include "server/generation.h"

#include <chrono>
#include <cstdio>
#include <random>

#include "core/error.h"
#include "engine/bad_words.h"
#include "server/api_error.h"
#include "server/chat_prompt.h"
#include "server/prompt_logprobs_json.h"
#include "server/tool_choice_grammar.h"

namespace pagoda::server {

namespace {

using Json = nlohmann::json;
using namespace std::chrono_literals;

const char* finish_reason_json(FinishReason r) {
  return r == FinishReason::Length ? "length" : r == FinishReason::Stop ? "stop" : "abort";
}

Json logprobs_json(GenerationContext& ctx, bool chat, const std::vector<SampledToken>& lps,
                   size_t from) {
  const Tokenizer& tok = ctx.engine.tokenizer();
  auto text_of = [&](int32_t id) { return tok.decode(std::vector<int32_t>{id}, false); };
  auto bytes_of = [](const std::string& s) {
    Json b = Json::array();
    for (unsigned char c : s) b.push_back(c);
    return b;
  };
  if (chat) {
    Json content = Json::array();
    for (size_t i = from; i < lps.size(); ++i) {
      Json top = Json::array();
      for (const auto& [id, lp] : lps[i].top_logprobs) {
        const std::string t = text_of(id);
        top.push_back({{"token", t}, {"logprob", lp}, {"bytes", bytes_of(t)}});
      }
      const std::string t = text_of(lps[i].token);
      content.push_back({{"token", t},
                         {"logprob", lps[i].logprob},
                         {"bytes", bytes_of(t)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  Json tokens = Json::array(), token_logprobs = Json::array(), top_logprobs = Json::array();
  for (size_t i = from; i < lps.size(); ++i) {
    tokens.push_back(text_of(lps[i].token));
    token_logprobs.push_back(lps[i].logprob);
    Json top = Json::object();
    for (const auto& [id, lp] : lps[i].top_logprobs) top[text_of(id)] = lp;
    top_logprobs.push_back(top);
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top_logprobs}};
}

// vLLM's tool call ids: "chatcmpl-tool-" and random hex, unique enough
// for a client to match a tool result to its call.
std::string tool_call_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[40];
  std::snprintf(buf, sizeof buf, "chatcmpl-tool-%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

Json tool_call_json(const ParsedToolCall& call) {
  return {{"id", tool_call_id()},
          {"type", "function"},
          {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

// An aborted request never finished scoring its prompt: null, as vLLM
// leaves prompt_logprobs unset when it has none.
Json prompt_logprobs_of(GenerationContext& ctx, const RequestOutput& out) {
  if (!out.prompt_logprobs) return Json();
  return prompt_logprobs_json(*out.prompt_logprobs, ctx.engine.tokenizer());
}

}  // namespace

Submitted submit_generation(GenerationContext& ctx, const GenerationRequest& req,
                            const std::string& id) {
  if (!req.model.empty() && req.model != ctx.model_name) {
    throw ApiError(404, "NotFoundError", "The model `" + req.model + "` does not exist.", "model");
  }
  std::vector<std::vector<int32_t>> prompts;
  if (req.chat) {
    prompts.push_back(chat_prompt_ids(ctx.engine.tokenizer(), ctx.chat_template, req.chat_prompt));
  } else {
    for (const std::string& t : req.text_prompts)
      prompts.push_back(ctx.engine.tokenizer().encode(t, req.add_special_tokens));
    for (const auto& ids : req.id_prompts) prompts.push_back(ids);
  }
  const int64_t max_len = ctx.engine.engine().max_model_len();
  // The engine checks these ids too, but its InputError cannot name the field.
  const int64_t vocab = ctx.engine.engine().model_config().vocab_size;
  for (const auto& entry : req.sampling.logit_bias) {
    if (entry.first >= vocab) {
      throw bad_request("logit_bias names token " + std::to_string(entry.first) +
                            ", outside the vocabulary [0, " + std::to_string(vocab) + ")",
                        "logit_bias");
    }
  }
  for (int32_t id : req.sampling.allowed_token_ids) {
    if (id >= vocab) {
      throw bad_request("allowed_token_ids holds token " + std::to_string(id) +
                            ", outside the vocabulary [0, " + std::to_string(vocab) + ")",
                        "allowed_token_ids");
    }
  }
  const auto bad_words = bad_words_token_ids(ctx.engine.tokenizer(), req.bad_words);
  Submitted sub;
  sub.id = id;
  sub.created = std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  sub.chat = req.chat;
  sub.top_logprobs = req.top_logprobs;
  sub.include_usage = req.include_usage;
  sub.return_token_ids = req.return_token_ids;
  sub.prompt_logprobs = req.prompt_logprobs >= 0 && !req.stream;
  sub.n = req.n;
  structured::OutputSpec constraint = req.structured_output;
  std::string constraint_field = req.structured_field;
  if (req.chat) {
    const bool has_tools = req.chat_prompt.tools.is_array() && !req.chat_prompt.tools.empty();
    if (req.tool_choice == "required" || req.tool_choice == "function") {
      if (!has_tools) throw bad_request("tool_choice " + (req.tool_choice == "required" ? std::string("\"required\"") : "naming a function") + " needs tools", "tool_choice");
      if (!ctx.tool_format) {
        throw bad_request(
            "tool_choice \"required\" or a named function requires the server to be started with "
            "--enable-auto-tool-choice and --tool-call-parser",
            "tool_choice");
      }
      if (!constraint.empty()) {
        throw bad_request("tool_choice \"required\" or a named function cannot be combined with " +
                              constraint_field,
                          "tool_choice");
      }
      constraint = {structured::OutputSpec::Kind::Grammar,
                    tool_choice_gbnf(*ctx.tool_format, req.chat_prompt.tools, req.tool_choice_function,
                                     &ctx.engine.engine().grammar_compiler().vocab())};
      constraint_field = "tool_choice";
    }
    if (req.tool_choice == "auto" && has_tools && !ctx.tool_format) {
      throw bad_request(
          "\"auto\" tool choice requires the server to be started with --enable-auto-tool-choice "
          "and --tool-call-parser",
          "tool_choice");
    }
    if (has_tools && req.tool_choice != "none") sub.tool_format = ctx.tool_format;
    if (ctx.reasoning_format)
      sub.thinking = starts_thinking(*ctx.reasoning_format, req.chat_prompt.chat_template_kwargs);
  }
  // Compiled once for every choice (and cached across requests by spec).
  std::shared_ptr<const structured::CompiledGrammar> grammar;
  if (!constraint.empty()) {
    // A reasoning model whose output starts in its think block closes it
    // at once (no reasoning, as with thinking disabled): the constrained
    // text is then all content, where the parsers look for it.
    if (sub.thinking.value_or(false)) constraint.prefix = "</think>";
    try {
      grammar = ctx.engine.engine().grammar_compiler().compile(constraint);
    } catch (const InputError& e) {
      throw bad_request(constraint_field + ": " + e.what(), constraint_field);
    }
  }
  for (size_t p = 0; p < prompts.size(); ++p) {
    const auto len = static_cast<int64_t>(prompts[p].size());
    if (len == 0) throw bad_request("the prompt is empty", req.chat ? "messages" : "prompt");
    const int64_t max_tokens = req.max_tokens ? *req.max_tokens : (req.chat ? max_len - len : 16);
    if (len + max_tokens > max_len || max_tokens < 1) {
      throw bad_request("This model's maximum context length is " + std::to_string(max_len) +
                            " tokens. However, you requested " + std::to_string(len + max_tokens) +
                            " tokens (" + std::to_string(len) + " in the prompt, " +
                            std::to_string(max_tokens) + " for the completion).",
                        req.chat ? "messages" : "prompt");
    }
    // The engine checks these too, but its InputError cannot name the field.
    if (req.sampling.min_tokens > max_tokens) {
      throw bad_request("min_tokens (" + std::to_string(req.sampling.min_tokens) +
                            ") must not exceed max_tokens (" + std::to_string(max_tokens) + ")",
                        "min_tokens");
    }
    if (req.sampling.priority != 0 &&
        ctx.engine.engine().options().scheduling_policy != SchedulingPolicy::Priority) {
      throw bad_request("priority " + std::to_string(req.sampling.priority) +
                            " given, but priority scheduling is off (start the server with "
                            "--scheduling-policy priority)",
                        "priority");
    }
    sub.prompt_tokens.push_back(len);
    for (int c = 0; c < req.n; ++c) {
      SamplingParams params = req.sampling.for_choice(c);  // distinct choices, reproducible
      params.bad_words_token_ids = bad_words;
      params.grammar = grammar;
      // Tool-call markers may be special tokens (where a tokenizer flags
      // them so): the parser must see them (vLLM's tool parsers do the same).
      if (sub.tool_format) params.skip_special_tokens = false;
      params.max_tokens = static_cast<int>(max_tokens);
      // A stream sends each step's additions; a response only the end.
      params.output_kind = req.stream ? RequestOutputKind::Delta : RequestOutputKind::FinalOnly;
      params.logprobs = req.top_logprobs;
      // Scored only when the response carries them (streams do not).
      params.prompt_logprobs = sub.prompt_logprobs ? req.prompt_logprobs : -1;
      const std::string rid = id + "-" + std::to_string(p) + "-" + std::to_string(c);
      try {
        sub.streams.push_back(ctx.engine.submit(rid, prompts[p], params));
      } catch (const InputError& e) {
        for (const std::string& done : sub.request_ids) ctx.engine.abort(done);
        throw bad_request(e.what());
      }
      sub.request_ids.push_back(rid);
    }
  }
  return sub;
}

Json collect_response(GenerationContext& ctx, Submitted& sub) {
  Json choices = Json::array();
  int64_t completion_tokens = 0;
  std::optional<RequestOutput> first;  // choice 0's final output (a chat's prompt fields)
  for (size_t i = 0; i < sub.streams.size(); ++i) {
    std::optional<RequestOutput> last;
    while (!last || !last->finished) {
      auto out = sub.streams[i]->next(1000ms);
      if (out) last = std::move(out);
    }
    ctx.metrics.record_request(*last);
    completion_tokens += static_cast<int64_t>(last->token_ids.size());
    Json choice = {{"index", i}, {"finish_reason", finish_reason_json(last->finish_reason)}};
    choice["logprobs"] =
        sub.top_logprobs >= 0 ? logprobs_json(ctx, sub.chat, last->logprobs, 0) : Json();
    if (sub.parses_output()) {
      ChatOutputParser parser(sub.thinking, sub.tool_format);
      ChatOutputDelta whole = parser.feed(last->text);
      ChatOutputDelta rest = parser.finish();
      whole.reasoning += rest.reasoning;
      whole.content += rest.content;
      for (auto& c : rest.calls) whole.calls.push_back(std::move(c));
      Json message = {{"role", "assistant"},
                      {"content", whole.content.empty() ? Json() : Json(whole.content)}};
      if (sub.thinking)
        message["reasoning_content"] = whole.reasoning.empty() ? Json() : Json(whole.reasoning);
      if (!whole.calls.empty()) {
        Json calls = Json::array();
        for (const auto& c : whole.calls) calls.push_back(tool_call_json(c));
        message["tool_calls"] = calls;
        choice["finish_reason"] = "tool_calls";
      }
      choice["message"] = message;
    } else if (sub.chat) {
      choice["message"] = {{"role", "assistant"}, {"content", last->text}};
    } else {
      choice["text"] = last->text;
    }
    if (sub.return_token_ids) choice["token_ids"] = last->token_ids;
    // Completions put the prompt's fields in each choice (its prompt may
    // differ from the other choices'); a chat has one prompt, so vLLM puts
    // them at the top of the response (filled below).
    if (!sub.chat && sub.return_token_ids) choice["prompt_token_ids"] = last->prompt_ids;
    if (!sub.chat && sub.prompt_logprobs)
      choice["prompt_logprobs"] = prompt_logprobs_of(ctx, *last);
    if (i == 0) first = std::move(last);
    choices.push_back(choice);
  }
  int64_t prompt_tokens = 0;
  for (int64_t t : sub.prompt_tokens) prompt_tokens += t;
  Json response = {{"id", sub.id},
                   {"object", sub.chat ? "chat.completion" : "text_completion"},
                   {"created", sub.created},
                   {"model", ctx.model_name},
                   {"choices", choices},
                   {"usage",
                    {{"prompt_tokens", prompt_tokens},
                     {"completion_tokens", completion_tokens},
                     {"total_tokens", prompt_tokens + completion_tokens}}}};
  if (sub.chat && sub.prompt_logprobs)
    response["prompt_logprobs"] = prompt_logprobs_of(ctx, *first);
  if (sub.chat && sub.return_token_ids) response["prompt_token_ids"] = first->prompt_ids;
  return response;
}

EventStream::EventStream(GenerationContext& ctx, Submitted sub)
    : ctx_(ctx),
      sub_(std::move(sub)),
      done_(sub_.streams.size(), false),
      sent_first_(sub_.streams.size(), false) {
  if (sub_.parses_output()) {
    for (size_t i = 0; i < sub_.streams.size(); ++i)
      parsers_.emplace_back(sub_.thinking, sub_.tool_format);
    calls_sent_.assign(sub_.streams.size(), 0);
  }
}

EventStream::~EventStream() { abort_all("stream closed"); }

std::vector<Json> EventStream::parsed_deltas(size_t choice, const RequestOutput& out) {
  ChatOutputDelta d = parsers_[choice].feed(out.new_text);
  if (out.finished) {
    ChatOutputDelta rest = parsers_[choice].finish();
    d.reasoning += rest.reasoning;
    d.content += rest.content;
    for (auto& c : rest.calls) d.calls.push_back(std::move(c));
  }
  std::vector<Json> deltas;
  if (!d.reasoning.empty() || !d.content.empty()) {
    Json delta = Json::object();
    if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
    if (!d.content.empty()) delta["content"] = d.content;
    deltas.push_back(delta);
  }
  for (const ParsedToolCall& call : d.calls) {
    const int index = calls_sent_[choice]++;
    deltas.push_back({{"tool_calls", Json::array({{{"index", index},
                                                   {"id", tool_call_id()},
                                                   {"type", "function"},
                                                   {"function", {{"name", call.name}, {"arguments", ""}}}}})}});
    deltas.push_back(
        {{"tool_calls",
          Json::array({{{"index", index}, {"function", {{"arguments", call.arguments}}}}})}});
  }
  return deltas;
}

void EventStream::abort_all(const char* why) {
  for (size_t i = 0; i < sub_.streams.size(); ++i) {
    if (done_[i]) continue;
    ctx_.engine.abort(sub_.request_ids[i]);
    ctx_.metrics.record_aborted();
    std::fprintf(stderr, "pagoda: request %s aborted: %s\n", sub_.request_ids[i].c_str(), why);
    done_[i] = true;
  }
}

std::string EventStream::chunk_for(size_t choice, const RequestOutput& out) {
  if (sub_.parses_output()) {
    std::vector<Json> deltas = parsed_deltas(choice, out);
    const bool extras = sub_.top_logprobs >= 0 || sub_.return_token_ids;
    // Text the parser holds back (a possible marker, a call in progress)
    // sends nothing yet, unless the client asked for per-token fields.
    if (deltas.empty() && !out.finished && !extras) return "";
    if (deltas.empty()) deltas.push_back(Json::object());
    std::string events;
    for (size_t k = 0; k < deltas.size(); ++k) {
      const bool first = !sent_first_[choice];
      sent_first_[choice] = true;
      const bool last = k + 1 == deltas.size();
      if (first) deltas[k]["role"] = "assistant";
      Json c = {{"index", choice}, {"delta", deltas[k]}};
      c["logprobs"] = k == 0 && sub_.top_logprobs >= 0 && !out.new_token_ids.empty()
                          ? logprobs_json(ctx_, true, out.logprobs,
                                          out.logprobs.size() - out.new_token_ids.size())
                          : Json();
      c["finish_reason"] =
          last && out.finished
              ? Json(calls_sent_[choice] > 0 ? "tool_calls" : finish_reason_json(out.finish_reason))
              : Json();
      if (k == 0 && sub_.return_token_ids) c["token_ids"] = out.new_token_ids;
      Json chunk = {{"id", sub_.id},
                    {"object", "chat.completion.chunk"},
                    {"created", sub_.created},
                    {"model", ctx_.model_name},
                    {"choices", Json::array({c})}};
      if (sub_.return_token_ids && first) chunk["prompt_token_ids"] = out.prompt_ids;
      events += "data: " + chunk.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n";
    }
    return events;
  }
  Json c = {{"index", choice}};
  c["finish_reason"] = out.finished ? Json(finish_reason_json(out.finish_reason)) : Json();
  c["logprobs"] = sub_.top_logprobs >= 0 && !out.new_token_ids.empty()
                      ? logprobs_json(ctx_, sub_.chat, out.logprobs,
                                      out.logprobs.size() - out.new_token_ids.size())
                      : Json();
  const bool first = !sent_first_[choice];
  sent_first_[choice] = true;
  if (sub_.chat) {
    Json delta = Json::object();
    if (first) delta["role"] = "assistant";
    if (!out.new_text.empty() || !out.finished) delta["content"] = out.new_text;
    c["delta"] = delta;
  } else {
    c["text"] = out.new_text;
  }
  // As vLLM streams them: each chunk the ids it adds, and a choice's first
  // chunk the prompt's (in the choice for completions, at the top for chat).
  if (sub_.return_token_ids) c["token_ids"] = out.new_token_ids;
  if (sub_.return_token_ids && first && !sub_.chat) c["prompt_token_ids"] = out.prompt_ids;
  Json chunk = {{"id", sub_.id},
                {"object", sub_.chat ? "chat.completion.chunk" : "text_completion"},
                {"created", sub_.created},
                {"model", ctx_.model_name},
                {"choices", Json::array({c})}};
  if (sub_.return_token_ids && first && sub_.chat) chunk["prompt_token_ids"] = out.prompt_ids;
  return "data: " + chunk.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n";
}

bool EventStream::sends(const RequestOutput& out) const {
  // Text held back (a possible stop string, an incomplete character) still
  // carries logprobs and token ids the client asked for.
  return !out.new_text.empty() || out.finished || sub_.top_logprobs >= 0 ||
         (sub_.return_token_ids && !out.new_token_ids.empty());
}

std::string EventStream::next_events(bool* finished, std::chrono::milliseconds wait) {
  *finished = false;
  if (finished_) {
    *finished = true;
    return "";
  }
  std::string events;
  for (size_t i = 0; i < sub_.streams.size(); ++i) {
    while (!done_[i]) {
      auto out = sub_.streams[i]->next(0ms);
      if (!out) break;
      // Counted whether or not this output sends a chunk: with delta
      // outputs, tokens whose text is held back are never seen again.
      completion_tokens_ += static_cast<int64_t>(out->new_token_ids.size());
      if (!sends(*out)) continue;
      events += chunk_for(i, *out);
      if (out->finished) {
        done_[i] = true;
        ctx_.metrics.record_request(*out);
      }
    }
  }
  const bool all_done = std::all_of(done_.begin(), done_.end(), [](bool d) { return d; });
  if (all_done) {
    if (sub_.include_usage) {
      int64_t prompt_tokens = 0;
      for (int64_t t : sub_.prompt_tokens) prompt_tokens += t;
      const Json usage = {{"id", sub_.id},
                          {"object", sub_.chat ? "chat.completion.chunk" : "text_completion"},
                          {"created", sub_.created},
                          {"model", ctx_.model_name},
                          {"choices", Json::array()},
                          {"usage",
                           {{"prompt_tokens", prompt_tokens},
                            {"completion_tokens", completion_tokens_},
                            {"total_tokens", prompt_tokens + completion_tokens_}}}};
      events += "data: " + usage.dump() + "\n\n";
    }
    events += "data: [DONE]\n\n";
    finished_ = true;
    *finished = true;
    return events;
  }
  if (events.empty() && wait.count() > 0) {  // nothing ready: wait on the first open choice
    for (size_t i = 0; i < sub_.streams.size(); ++i) {
      if (done_[i]) continue;
      if (auto out = sub_.streams[i]->next(wait)) {
        if (sends(*out)) events += chunk_for(i, *out);
        completion_tokens_ += static_cast<int64_t>(out->new_token_ids.size());
        if (out->finished) {
          done_[i] = true;
          ctx_.metrics.record_request(*out);
        }
      }
      break;
    }
  }
  return events;
}

}  // namespace pagoda::server
