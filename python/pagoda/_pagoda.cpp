// The C++ side of `import pagoda`: a thin pybind11 layer over the engine
// (engine/llm.h, engine/async_engine.h), the tokenizer and the server's chat
// prompt rendering. It converts values and errors only; the vLLM-shaped
// classes (LLM, SamplingParams, RequestOutput, ...) are plain Python in
// python/pagoda/*.py, built on what this module exposes.
//
// Threads: every call that runs the model releases the GIL. LLM.generate
// takes it back for a moment after each engine step to run Python's signal
// handlers (Ctrl-C) and the progress bar; an exception there aborts the
// call's requests (LLM::generate frees their KV blocks) and reaches Python.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <mutex>
#include <unordered_map>
#include <variant>
#include <vector>

#include "core/error.h"
#include "engine/async_engine.h"
#include "engine/bad_words.h"
#include "engine/llm.h"
#include "kv/kv_cache_dtype.h"
#include "models/quantize.h"
#include "server/api_error.h"
#include "server/chat_prompt.h"
#include "server/protocol.h"

namespace py = pybind11;

namespace pagoda {
namespace {

// Thrown through the engine when a Python exception (KeyboardInterrupt, or
// one raised by the progress callback) is pending in this thread's state.
struct PythonErrorPending {};

py::dict stats_dict(const EngineStats& s) {
  py::dict d;
  d["num_running"] = s.num_running;
  d["num_waiting"] = s.num_waiting;
  d["kv_blocks_total"] = s.kv_blocks_total;
  d["kv_blocks_free"] = s.kv_blocks_free;
  d["kv_token_capacity"] = s.kv_token_capacity;
  d["prefix_cache_queried_tokens"] = s.prefix_cache_queried_tokens;
  d["prefix_cache_hit_tokens"] = s.prefix_cache_hit_tokens;
  d["num_preemptions"] = s.num_preemptions;
  return d;
}

// (token, logprob, [(id, logprob), ...]) per generated token.
py::list sampled_logprobs(const std::vector<SampledToken>& lps) {
  py::list out;
  for (const SampledToken& s : lps) out.append(py::make_tuple(s.token, s.logprob, s.top_logprobs));
  return out;
}

// (token, logprob, rank, [(id, logprob), ...]) per prompt position after
// the first, or None before the prompt is scored.
py::object prompt_logprobs(const std::shared_ptr<const PromptLogprobs>& p) {
  if (!p) return py::none();
  py::list out;
  for (size_t i = 0; i < p->size(); ++i) {
    py::list top;
    const auto ids = p->top_ids(i);
    const auto lps = p->top_logprobs(i);
    for (size_t k = 0; k < ids.size(); ++k) top.append(py::make_tuple(ids[k], lps[k]));
    out.append(py::make_tuple(p->token(i), p->logprob(i), p->rank(i), top));
  }
  return out;
}

py::dict metrics_dict(const RequestMetrics& m) {
  py::dict d;
  d["num_prompt_tokens"] = m.num_prompt_tokens;
  d["num_cached_tokens"] = m.num_cached_tokens;
  d["num_output_tokens"] = m.num_output_tokens;
  d["num_preemptions"] = m.num_preemptions;
  d["time_to_first_token_s"] = m.time_to_first_token_s;
  d["time_per_output_token_s"] = m.time_per_output_token_s;
  d["e2e_latency_s"] = m.e2e_latency_s;
  return d;
}

// A chat request body (messages, tools, add_generation_prompt,
// continue_final_message, add_special_tokens, chat_template_kwargs) read by
// the server's own parser, so Python renders exactly as /v1/chat/completions.
server::ChatPrompt chat_prompt(const std::string& body_json) {
  return server::parse_chat_prompt(nlohmann::ordered_json::parse(body_json));
}

const std::string& template_or_model(const Tokenizer& tok, const std::optional<std::string>& t) {
  return t ? *t : tok.chat_template();
}

using PromptArg = std::variant<std::string, std::vector<int32_t>>;

// One engine steps for one caller at a time: generate releases the GIL, so
// two Python threads could otherwise run LLMEngine::step concurrently (the
// engine is single-threaded, as vLLM's LLM). Looked up with the GIL held;
// taken without it (a stepping thread re-acquires the GIL for its progress
// callback, so waiting for this lock while holding the GIL would deadlock).
std::mutex& engine_lock(const LLM& llm) {
  static std::unordered_map<const LLM*, std::unique_ptr<std::mutex>> locks;
  auto& m = locks[&llm];
  if (!m) m = std::make_unique<std::mutex>();
  return *m;
}

std::vector<RequestOutput> generate(LLM& llm, const std::vector<PromptArg>& prompts,
                                    const std::vector<SamplingParams>& params,
                                    const py::object& progress) {
  std::vector<Prompt> ps;
  ps.reserve(prompts.size());
  for (const PromptArg& p : prompts) {
    ps.push_back(std::holds_alternative<std::string>(p)
                     ? Prompt::from_text(std::get<std::string>(p))
                     : Prompt::from_ids(std::get<std::vector<int32_t>>(p)));
  }
  const LLM::Progress after_step = [&progress](size_t done, size_t total) {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw PythonErrorPending{};
    if (progress.is_none()) return;
    try {
      progress(done, total);
    } catch (py::error_already_set& e) {
      e.restore();
      throw PythonErrorPending{};
    }
  };
  std::mutex& lock = engine_lock(llm);
  try {
    py::gil_scoped_release nogil;
    const std::lock_guard<std::mutex> one_caller(lock);
    return llm.generate(ps, params, after_step);
  } catch (const PythonErrorPending&) {
    throw py::error_already_set();  // the GIL is held again here
  }
}

}  // namespace
}  // namespace pagoda

PYBIND11_MODULE(_pagoda, m) {
  using namespace pagoda;
  m.doc() = "Pagoda's engine (C++); use the classes of the `pagoda` package";

  // The engine's errors name the bad input: Python callers get them as
  // ValueError with the same message (bad flags, prompts, checkpoints).
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const InputError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const server::ApiError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const nlohmann::json::exception& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  py::class_<EngineOptions>(m, "EngineOptions")
      .def(py::init<>())
      .def_readwrite("kv_cache_memory", &EngineOptions::kv_cache_memory)
      .def_readwrite("block_size", &EngineOptions::block_size)
      .def_readwrite("max_num_seqs", &EngineOptions::max_num_seqs)
      .def_readwrite("max_num_batched_tokens", &EngineOptions::max_num_batched_tokens)
      .def_readwrite("max_model_len", &EngineOptions::max_model_len)
      .def_readwrite("num_threads", &EngineOptions::num_threads)
      .def_readwrite("enable_prefix_caching", &EngineOptions::enable_prefix_caching)
      .def_readwrite("max_num_scored_prompt_tokens", &EngineOptions::max_num_scored_prompt_tokens)
      .def_readwrite("repack_weights", &EngineOptions::repack_weights)
      // Names as the CLI flags take them, parsed by the same functions.
      .def("set_kv_cache_dtype",
           [](EngineOptions& o, const std::string& s) { o.kv_cache_dtype = parse_kv_cache_dtype(s); })
      .def("set_indexer_cache_dtype",
           [](EngineOptions& o, const std::string& s) {
             o.indexer_cache_dtype = parse_indexer_cache_dtype(s);
           })
      .def("set_quantization",
           [](EngineOptions& o, const std::string& s) { o.quantization = parse_quantization(s); })
      .def("set_scheduling_policy", [](EngineOptions& o, const std::string& s) {
        if (s != "fcfs" && s != "priority") {
          throw InputError("scheduling_policy must be 'fcfs' or 'priority', got '" + s + "'");
        }
        o.scheduling_policy = s == "priority" ? SchedulingPolicy::Priority : SchedulingPolicy::Fcfs;
      });

  py::class_<SamplingParams>(m, "SamplingParams")
      .def(py::init<>())
      .def_readwrite("temperature", &SamplingParams::temperature)
      .def_readwrite("top_p", &SamplingParams::top_p)
      .def_readwrite("top_k", &SamplingParams::top_k)
      .def_readwrite("min_p", &SamplingParams::min_p)
      .def_readwrite("seed", &SamplingParams::seed)
      .def_readwrite("repetition_penalty", &SamplingParams::repetition_penalty)
      .def_readwrite("presence_penalty", &SamplingParams::presence_penalty)
      .def_readwrite("frequency_penalty", &SamplingParams::frequency_penalty)
      .def_readwrite("max_tokens", &SamplingParams::max_tokens)
      .def_readwrite("min_tokens", &SamplingParams::min_tokens)
      .def_readwrite("stop", &SamplingParams::stop)
      .def_readwrite("stop_token_ids", &SamplingParams::stop_token_ids)
      .def_readwrite("ignore_eos", &SamplingParams::ignore_eos)
      .def_readwrite("logprobs", &SamplingParams::logprobs)
      .def_readwrite("prompt_logprobs", &SamplingParams::prompt_logprobs)
      .def_readwrite("skip_special_tokens", &SamplingParams::skip_special_tokens)
      .def_readwrite("logit_bias", &SamplingParams::logit_bias)
      .def_readwrite("allowed_token_ids", &SamplingParams::allowed_token_ids)
      .def_readwrite("bad_words_token_ids", &SamplingParams::bad_words_token_ids)
      .def_readwrite("priority", &SamplingParams::priority)
      .def("validate", &SamplingParams::validate)
      .def("for_choice", &SamplingParams::for_choice);

  py::class_<RequestOutput>(m, "RequestOutput")
      .def_readonly("request_id", &RequestOutput::request_id)
      .def_readonly("prompt_token_ids", &RequestOutput::prompt_ids)
      .def_readonly("token_ids", &RequestOutput::token_ids)
      .def_readonly("text", &RequestOutput::text)
      .def_readonly("new_token_ids", &RequestOutput::new_token_ids)
      .def_readonly("new_text", &RequestOutput::new_text)
      .def_readonly("finished", &RequestOutput::finished)
      .def_property_readonly("finish_reason",
                             [](const RequestOutput& o) -> py::object {
                               if (o.finish_reason == FinishReason::None) return py::none();
                               return py::str(finish_reason_name(o.finish_reason));
                             })
      .def_property_readonly("logprobs",
                             [](const RequestOutput& o) { return sampled_logprobs(o.logprobs); })
      .def_property_readonly("prompt_logprobs",
                             [](const RequestOutput& o) { return prompt_logprobs(o.prompt_logprobs); })
      .def_property_readonly("metrics", [](const RequestOutput& o) { return metrics_dict(o.metrics); });

  py::class_<Tokenizer>(m, "Tokenizer")
      .def("encode", &Tokenizer::encode, py::arg("text"), py::arg("add_special_tokens") = true)
      .def(
          "decode",
          [](const Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special_tokens) {
            return t.decode(ids, skip_special_tokens);
          },
          py::arg("ids"), py::arg("skip_special_tokens") = true)
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size)
      .def("id_to_token", &Tokenizer::id_to_token)
      .def("token_to_id", &Tokenizer::token_to_id)
      .def("is_special", &Tokenizer::is_special)
      .def_property_readonly("bos_token_id", &Tokenizer::bos_token_id)
      .def_property_readonly("eos_token_id", &Tokenizer::eos_token_id)
      .def_property_readonly("bos_token", &Tokenizer::bos_token)
      .def_property_readonly("eos_token", &Tokenizer::eos_token)
      .def_property_readonly("chat_template", &Tokenizer::chat_template)
      // `body` is a chat request's JSON; `chat_template` None: the model's.
      .def("render_chat",
           [](const Tokenizer& t, const std::string& body, const std::optional<std::string>& tpl) {
             return server::chat_prompt_text(t, template_or_model(t, tpl), chat_prompt(body));
           })
      .def("chat_prompt_ids",
           [](const Tokenizer& t, const std::string& body, const std::optional<std::string>& tpl) {
             return server::chat_prompt_ids(t, template_or_model(t, tpl), chat_prompt(body));
           })
      .def("bad_words_token_ids", [](const Tokenizer& t, const std::vector<std::string>& words) {
        return bad_words_token_ids(t, words);
      });

  py::class_<LLM>(m, "Engine")
      .def(py::init<const std::string&, const EngineOptions&>(),
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("tokenizer", &LLM::tokenizer, py::return_value_policy::reference_internal)
      .def_property_readonly("max_model_len", [](LLM& l) { return l.engine().max_model_len(); })
      .def_property_readonly("vocab_size",
                             [](LLM& l) { return l.engine().model_config().vocab_size; })
      .def_property_readonly("block_size",
                             [](LLM& l) { return l.engine().options().block_size; })
      .def("stats",
           [](LLM& l) {
             std::mutex& lock = engine_lock(l);
             EngineStats stats;
             {
               py::gil_scoped_release nogil;
               const std::lock_guard<std::mutex> one_caller(lock);
               stats = l.engine().stats();
             }
             return stats_dict(stats);
           })
      .def("validate_request",
           [](LLM& l, const std::vector<int32_t>& ids, const SamplingParams& p) {
             l.engine().validate_request(ids, p);
           })
      .def("generate", &generate, py::arg("prompts"), py::arg("params"),
           py::arg("progress") = py::none());

  py::class_<AsyncEngine::Stream, std::shared_ptr<AsyncEngine::Stream>>(m, "Stream")
      // The next output, or None after `timeout_ms` without one (or once
      // the final output was taken). Waits without the GIL.
      .def(
          "next",
          [](AsyncEngine::Stream& s, int64_t timeout_ms) {
            return s.next(std::chrono::milliseconds(timeout_ms));
          },
          py::call_guard<py::gil_scoped_release>())
      .def("done", &AsyncEngine::Stream::done);

  py::class_<AsyncEngine>(m, "AsyncEngine")
      .def(py::init<const std::string&, const EngineOptions&>(),
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("tokenizer", &AsyncEngine::tokenizer,
                             py::return_value_policy::reference_internal)
      .def_property_readonly("max_model_len",
                             [](AsyncEngine& a) { return a.engine().max_model_len(); })
      .def_property_readonly("vocab_size",
                             [](AsyncEngine& a) { return a.engine().model_config().vocab_size; })
      .def("submit", &AsyncEngine::submit)
      .def("abort", &AsyncEngine::abort)
      .def("num_unfinished", &AsyncEngine::num_unfinished)
      .def("stats", [](AsyncEngine& a) { return stats_dict(a.stats()); })
      .def(
          "shutdown",
          [](AsyncEngine& a, int64_t grace_ms) { a.shutdown(std::chrono::milliseconds(grace_ms)); },
          py::call_guard<py::gil_scoped_release>());
}
