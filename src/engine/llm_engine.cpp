#include "engine/llm_engine.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/meminfo.h"
#include "core/parallel.h"
#include "engine/spec_decode/draft_model_proposer.h"
#include "engine/spec_decode/ngram_proposer.h"
#include "engine/spec_decode/rejection_sampler.h"

namespace pagoda {

namespace {

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The longest context the checkpoint supports, derived as vLLM does
// (_get_and_verify_max_len): max_position_embeddings, stretched by the
// factor of linear RoPE scaling (llama3 scaling already states the scaled
// length). 0 when the config does not say.
int64_t derived_max_model_len(const ModelConfig& config) {
  const double factor = config.rope_scaling.type == "linear" ? config.rope_scaling.factor : 1.0;
  return static_cast<int64_t>(static_cast<double>(config.max_position_embeddings) * factor);
}

// PAGODA_ALLOW_LONG_MAX_MODEL_LEN=1 (or true), the counterpart of vLLM's
// VLLM_ALLOW_LONG_MAX_MODEL_LEN: the user accepts positions the model was
// not trained for.
bool long_max_model_len_allowed() {
  const char* v = std::getenv("PAGODA_ALLOW_LONG_MAX_MODEL_LEN");
  if (v == nullptr) return false;
  std::string s(v);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s == "1" || s == "true";
}

// Start-up shared by rank 0 and the workers: checks, threads, and this
// rank's shard of the model. A failure on one rank (a file missing on one
// machine) is agreed on by all, so none waits forever for the others.
std::unique_ptr<CausalLM> load_shard(const std::string& model_dir, const EngineOptions& options,
                                     parallel::Communicator& comm) {
  parallel::check_tensor_parallel_size(options.tensor_parallel_size, comm);
  if (options.num_threads > 0) {
    set_num_threads(options.num_threads);
  } else if (comm.size() > 1) {  // mpirun binds each rank to its own core(s)
    set_num_threads(parallel::cpus_in_affinity_mask());
  }
  if (comm.size() == 1)
    return load_model(model_dir, comm, {options.quantization, options.repack_weights});
  std::unique_ptr<CausalLM> model;
  try {
    model = load_model(model_dir, comm, {options.quantization, options.repack_weights});
  } catch (const parallel::ParallelConfigError&) {
    throw;  // raised identically on every rank, before any collective
  } catch (...) {
    comm.all_ok(false);
    parallel::mark_exit_agreed();
    throw;
  }
  if (!comm.all_ok(true)) {
    parallel::mark_exit_agreed();
    throw_input_error("rank {}: another rank failed to load the model (see its message)",
                      comm.rank());
  }
  return model;
}

// PAGODA_REPORT_WEIGHT_MEMORY=1: one stderr line per rank with the bytes of
// weights it holds (checkpoint pages resident in this process + copies).
void report_weight_memory(const CausalLM& model, const parallel::Communicator& comm) {
  const char* v = std::getenv("PAGODA_REPORT_WEIGHT_MEMORY");
  if (!v || std::string(v) != "1") return;
  const int64_t mapped = resident_checkpoint_bytes();
  const auto owned = static_cast<int64_t>(model.owned_weight_bytes());
  std::fprintf(stderr,
               "pagoda[rank %d/%d]: weight memory %lld bytes (checkpoint resident %lld + owned "
               "%lld)\n",
               comm.rank(), comm.size(), static_cast<long long>(mapped + owned),
               static_cast<long long>(mapped), static_cast<long long>(owned));
  std::fflush(stderr);
}

// The KV cache dtype --kv-cache-dtype picks for this model (every rank
// resolves it alike: same flag, same checkpoint).
DType kv_dtype_of(const CausalLM& model, const EngineOptions& options) {
  return resolve_kv_cache_dtype(options.kv_cache_dtype, model.weight_dtype());
}

// The KV pool's groups and pools for this model's caches (same on every rank).
// The block size the user asked for, else the model's default.
int32_t block_size_of(const CausalLM& model, const EngineOptions& options) {
  return options.block_size > 0 ? options.block_size : model.default_block_size();
}

KVCachePlan kv_cache_plan(CausalLM& model, const EngineOptions& options,
                          const std::vector<LayerKVCache>& proposer_caches = {}) {
  const DType dtype = kv_dtype_of(model, options);
  if (options.indexer_cache_dtype != IndexerCacheDType::Auto) {
    if (!model.has_indexer_cache()) {
      throw_input_error("--indexer-cache-dtype is for DeepSeek V4's indexer keys; {} has none",
                        model.config().architecture);
    }
  }
  if (model.has_indexer_cache()) {
    model.set_indexer_cache_dtype(resolve_indexer_cache_dtype(options.indexer_cache_dtype, dtype));
  }
  if (!model.supports_kv_cache_dtype(dtype)) {
    throw_input_error(
        "--kv-cache-dtype {} is not supported for {} (fp8 is for DeepSeek's MLA caches with "
        "kv_lora_rank a multiple of 128)",
        kv_dtype_label(dtype), model.config().architecture);
  }
  std::vector<LayerKVCache> caches = model.kv_cache_specs(kv_dtype_of(model, options));
  append_proposer_caches(caches, proposer_caches);
  return plan_kv_cache(caches, block_size_of(model, options));
}

}  // namespace

void LLMEngine::run_worker(const std::string& model_dir, const EngineOptions& options) {
  parallel::Communicator& comm = parallel::world();
  PAGODA_CHECK(comm.rank() != 0, "run_worker on rank 0");
  std::unique_ptr<CausalLM> model = load_shard(model_dir, options, comm);
  // Rank 0 sizes the KV pools (it knows max_model_len and the budget) and
  // sends their count then each pool's block count, or -1 when it failed
  // to start.
  int64_t num_pools = -1;
  comm.broadcast(&num_pools, sizeof(num_pools), 0);
  if (num_pools < 0) {
    parallel::mark_exit_agreed();
    throw_input_error("rank {}: rank 0 failed to start the engine (see its message)", comm.rank());
  }
  std::vector<int64_t> num_blocks(static_cast<size_t>(num_pools));
  comm.broadcast(num_blocks.data(), num_blocks.size() * sizeof(int64_t), 0);
  ModelRunner runner(*model, kv_cache_plan(*model, options), num_blocks,
                     kv_dtype_of(*model, options), comm);
  runner.serve_worker();
  report_weight_memory(*model, comm);
}

LLMEngine::LLMEngine(const std::string& model_dir, const EngineOptions& options)
    : options_(options), comm_(parallel::world()) {
  if (options.block_size < 0)
    throw_input_error("block size must be >= 1 (or 0: the model's default), got {}",
                      options.block_size);
  if (options.max_num_seqs < 1) throw_input_error("max_num_seqs must be >= 1");
  if (options.max_num_batched_tokens < 1) throw_input_error("max_num_batched_tokens must be >= 1");
  if (options.max_num_scored_prompt_tokens < 1)
    throw_input_error("max_num_scored_prompt_tokens must be >= 1");
  PAGODA_CHECK(comm_.rank() == 0, "LLMEngine on rank {} (workers call run_worker)", comm_.rank());

  model_ = load_shard(model_dir, options, comm_);
  options_.block_size = block_size_of(*model_, options);
  // From here until the workers know the KV pool sizes, a failure must be
  // sent to them (a pool count of -1) before it propagates.
  std::vector<int64_t> num_blocks;
  KVCachePlan plan;
  try {
    init_after_load(model_dir, options, &num_blocks, &plan);
  } catch (...) {
    if (comm_.size() > 1) {
      int64_t failed = -1;
      comm_.broadcast(&failed, sizeof(failed), 0);
      parallel::mark_exit_agreed();
    }
    throw;
  }
  if (comm_.size() > 1) {
    int64_t num_pools = static_cast<int64_t>(num_blocks.size());
    comm_.broadcast(&num_pools, sizeof(num_pools), 0);
    comm_.broadcast(num_blocks.data(), num_blocks.size() * sizeof(int64_t), 0);
  }
  kv_ = std::make_unique<KVCacheManager>(
      plan, std::vector<int32_t>(num_blocks.begin(), num_blocks.end()),
      options.enable_prefix_caching);
  scheduler_ = std::make_unique<Scheduler>(
      SchedulerConfig{options.max_num_seqs, options.max_num_batched_tokens, options_.block_size,
                      options.scheduling_policy, options.max_num_scored_prompt_tokens,
                      proposer_keeps_kv_},
      *kv_);
  runner_ = std::make_unique<ModelRunner>(*model_, plan, num_blocks, kv_dtype_of(*model_, options),
                                          comm_);
  if (options.prefault_kv_cache) runner_->prefault_kv_cache();
  if (proposer_keeps_kv_) {
    proposer_->bind_kv_cache(plan, runner_->kv_memory(), runner_->num_layers(), *kv_);
  }
  // MTP entries pair a position with the next token (KVCacheManager).
  if (mtp_proposer_) kv_->set_drop_last_hit_block(true);
}

void LLMEngine::set_mtp_observer(MtpProposer::Observer observer) {
  if (!mtp_proposer_) throw_input_error("the MTP observer needs --speculative-config method mtp");
  mtp_proposer_->set_observer(std::move(observer));
}

void LLMEngine::init_speculation(const SpeculativeConfig& c) {
  switch (c.method) {
    case SpeculativeMethod::Ngram:
      proposer_ = std::make_unique<NgramProposer>(c.prompt_lookup_min, c.prompt_lookup_max);
      break;
    case SpeculativeMethod::DraftModel:
      // The draft's passes run on rank 0 alone.
      if (comm_.size() > 1) {
        throw_input_error(
            "--speculative-config: method draft_model is not supported under tensor "
            "parallelism");
      }
      proposer_ = std::make_unique<DraftModelProposer>(
          c.model, *model_, *tokenizer_, WeightOptions{options_.quantization, options_.repack_weights}, comm_);
      break;
    case SpeculativeMethod::Mtp: {
      if (!model_->has_mtp_layer()) {
        throw_input_error(
            "--speculative-config: method mtp needs a checkpoint with an MTP layer the engine "
            "runs (DeepSeek V3/V3.2/V4 with num_nextn_predict_layers >= 1); {} has none",
            model_->config().architecture);
      }
      // The layer's passes run on rank 0 alone.
      if (comm_.size() > 1) {
        throw_input_error(
            "--speculative-config: method mtp is not supported under tensor parallelism");
      }
      model_->enable_mtp();
      auto mtp = std::make_unique<MtpProposer>(*model_);
      mtp_proposer_ = mtp.get();
      proposer_ = std::move(mtp);
      break;
    }
  }
  // The adaptive switch's break-even per number of drafts (a MoE target's
  // verify step reads more experts the more tokens it has).
  const double plain_bytes = model_->expected_weight_bytes_per_step(1);
  for (int32_t k = 0; k <= c.num_speculative_tokens; ++k) {
    const double ratio =
        plain_bytes > 0 ? model_->expected_weight_bytes_per_step(k + 1) / plain_bytes : 1;
    spec_break_even_.push_back(
        AdaptiveSpeculation::break_even(k, ratio, proposer_->cost_per_draft_token()));
  }
}

void LLMEngine::init_after_load(const std::string& model_dir, const EngineOptions& options,
                                std::vector<int64_t>* num_blocks_out, KVCachePlan* plan_out) {
  tokenizer_ = Tokenizer::load(model_dir);
  const ModelConfig& config = model_->config();
  max_model_len_ =
      options.max_model_len > 0 ? options.max_model_len : config.max_position_embeddings;
  if (max_model_len_ <= 0) max_model_len_ = 2048;
  // Past the trained positions outputs degrade and the KV pool is sized for
  // the whole length (100000 on a 512-position model reserved 11.9 GiB), so
  // a longer limit must be asked for explicitly.
  const int64_t derived = derived_max_model_len(config);
  if (derived > 0 && options.max_model_len > derived && !long_max_model_len_allowed()) {
    const std::string source =
        config.rope_scaling.type == "linear"
            ? fmt::format("max_position_embeddings {} x linear rope_scaling factor {}",
                          config.max_position_embeddings, config.rope_scaling.factor)
            : fmt::format("max_position_embeddings {}", config.max_position_embeddings);
    throw_input_error(
        "--max-model-len {} exceeds the model's {} positions ({} in config.json); set "
        "PAGODA_ALLOW_LONG_MAX_MODEL_LEN=1 to allow it anyway (outputs past the trained "
        "positions may be wrong)",
        options.max_model_len, derived, source);
  }

  eos_ids_ = config.eos_token_ids;
  if (eos_ids_.empty() && tokenizer_->eos_token_id())
    eos_ids_.push_back(*tokenizer_->eos_token_id());

  // The proposer first: a draft model's caches join the target's plan.
  std::vector<LayerKVCache> proposer_caches;
  if (options.speculative_config) {
    init_speculation(*options.speculative_config);
    proposer_caches = proposer_->kv_cache_specs(kv_dtype_of(*model_, options));
    proposer_keeps_kv_ = !proposer_caches.empty();
  }
  KVCachePlan& plan = *plan_out;
  plan = kv_cache_plan(*model_, options, proposer_caches);
  // Rejected drafts are rolled back by counting their positions as not
  // computed, which is right for every cache here, DeepSeek V4's compressed
  // ones included: all are indexed by position (a compressed entry i sits
  // at a fixed slot and is visible to query t only once (i + 1) * r <= t + 1;
  // the compressor's rolling state is a window of per-position rows), and a
  // step writes its tokens' rows and the entries they complete before any
  // query reads them. So a rejected draft's K/V, state rows and entries are
  // rewritten by the accepted token's step before a query can see them
  // (tests/engine/test_v4_speculation.cpp).
  // Pools of different page granularity need different block counts: each
  // gets its share of the budget by what one max_model_len sequence needs
  // from it (size_kv_pools).
  const int64_t per_sequence = plan.reserved_bytes_per_sequence(max_model_len_);
  int64_t budget = options.kv_cache_memory;
  if (budget <= 0) {  // enough for max_num_seqs full-length sequences, within half the free RAM
    budget = std::min<int64_t>(per_sequence * options.max_num_seqs, available_memory_bytes() / 2);
  }
  if (budget < per_sequence) {
    throw_input_error(
        "KV cache of {} bytes ({}) is smaller than one sequence of max_model_len {} needs ({} "
        "bytes in {} pool(s), {}-token blocks); raise --kv-cache-memory or lower --max-model-len",
        budget, kv_dtype_label(kv_dtype_of(*model_, options)), max_model_len_, per_sequence,
        plan.pools.size(), options_.block_size);
  }
  const KVPoolSizes sizes = size_kv_pools(plan, budget, max_model_len_);
  kv_token_capacity_ = sizes.token_capacity;
  const std::vector<int64_t>& num_blocks = sizes.num_blocks;
  *num_blocks_out = num_blocks;
}

EngineStats LLMEngine::stats() const {
  EngineStats s;
  s.num_running = scheduler_->num_running();
  s.num_waiting = scheduler_->num_waiting();
  s.kv_blocks_total = kv_->num_blocks();
  s.kv_token_capacity = kv_token_capacity_;
  s.kv_blocks_free = kv_->num_free_blocks();
  s.prefix_cache_queried_tokens = kv_->queried_tokens();
  s.prefix_cache_hit_tokens = kv_->hit_tokens();
  s.num_preemptions = scheduler_->num_preemptions();
  s.spec_decode = spec_stats_;
  return s;
}

LLMEngine::~LLMEngine() {
  if (runner_) runner_->shutdown_workers();
  if (model_) report_weight_memory(*model_, comm_);
}

structured::GrammarCompiler& LLMEngine::grammar_compiler() const {
  std::call_once(grammar_compiler_once_, [&] {
    auto vocab = std::make_shared<const structured::TokenVocab>(
        *tokenizer_, static_cast<int32_t>(model_->config().vocab_size), eos_ids_);
    grammar_compiler_ = std::make_unique<structured::GrammarCompiler>(std::move(vocab));
  });
  return *grammar_compiler_;
}

void LLMEngine::validate_request(const std::vector<int32_t>& prompt_ids,
                                 const SamplingParams& params) const {
  params.validate();
  if (params.priority != 0 && options_.scheduling_policy != SchedulingPolicy::Priority) {
    throw_input_error(
        "priority {} given, but priority scheduling is off (start with "
        "--scheduling-policy priority)",
        params.priority);
  }
  if (prompt_ids.empty()) throw_input_error("the prompt is empty");
  if (static_cast<int64_t>(prompt_ids.size()) >= max_model_len_) {
    throw_input_error("the prompt has {} tokens, but the model's context length is {}",
                      prompt_ids.size(), max_model_len_);
  }
  const int64_t vocab = model_->config().vocab_size;
  params.validate_token_ids(vocab);
  for (int32_t id : prompt_ids) {
    if (id < 0 || id >= vocab) {
      throw_input_error("token id {} is outside the vocabulary [0, {})", id, vocab);
    }
  }
}

void LLMEngine::add_request(const std::string& request_id, std::vector<int32_t> prompt_ids,
                            const SamplingParams& params) {
  validate_request(prompt_ids, params);
  if (requests_.count(request_id)) throw_input_error("duplicate request id '{}'", request_id);
  auto request =
      std::make_unique<Request>(request_id, std::move(prompt_ids), params, tokenizer_.get());
  scheduler_->add(request.get());
  requests_.emplace(request_id, std::move(request));
}

void LLMEngine::add_request_with_context(const std::string& request_id,
                                         std::vector<int32_t> prompt_ids,
                                         const SamplingParams& params, int64_t num_computed,
                                         uint64_t seed) {
  validate_request(prompt_ids, params);
  if (requests_.count(request_id)) throw_input_error("duplicate request id '{}'", request_id);
  if (kv_->prefix_caching()) {
    throw_input_error("a context taken as computed needs prefix caching off (its pages hold no "
                      "token's K/V)");
  }
  if (comm_.size() > 1) {
    throw_input_error("a context taken as computed is not supported under tensor parallelism "
                      "(only rank 0's cache would be filled)");
  }
  if (params.prompt_logprobs >= 0) {
    throw_input_error("a context taken as computed has no prompt logprobs to score");
  }
  if (num_computed < 1 || num_computed >= static_cast<int64_t>(prompt_ids.size())) {
    throw_input_error("{} computed positions of a {}-token prompt: must be in [1, {})",
                      num_computed, prompt_ids.size(), prompt_ids.size());
  }
  auto request =
      std::make_unique<Request>(request_id, std::move(prompt_ids), params, tokenizer_.get());
  Request& r = *request;
  // Block by block, as a chunked prefill allocates: each call first
  // releases what fell out of a sliding group's window.
  const int64_t bs = kv_->block_size();
  for (int64_t done = 0; done < num_computed;) {
    const int64_t next = std::min(num_computed, done + bs);
    if (!kv_->allocate(r.kv, done, next)) {
      kv_->free(r.kv);
      throw_input_error(
          "the KV cache ({} blocks in all, of {} positions) cannot hold {} computed positions "
          "next to what it holds: raise --kv-cache-memory",
          kv_->num_blocks(), bs, num_computed);
    }
    done = next;
  }
  // What the first decode step's allocation would release first: a sliding
  // group still holds every page of the last chunk, most of them outside
  // the window of the query at num_computed.
  PAGODA_CHECK(kv_->allocate(r.kv, num_computed, num_computed), "releasing needs no page");
  runner_->fill_kv_pages(r.kv, seed);
  r.num_computed_tokens = num_computed;
  r.num_proposer_computed_tokens = num_computed;  // a proposer's pages are filled alike
  scheduler_->add(&r);
  requests_.emplace(request_id, std::move(request));
}

int64_t LLMEngine::kv_bytes_held(const std::string& request_id) const {
  const auto it = requests_.find(request_id);
  if (it == requests_.end()) throw_input_error("unknown request id '{}'", request_id);
  const KVCachePlan& plan = kv_->plan();
  const auto& tables = it->second->kv.block_tables;
  int64_t bytes = 0;
  for (size_t g = 0; g < tables.size(); ++g) {
    const int64_t pages = std::count_if(tables[g].begin(), tables[g].end(),
                                        [](int32_t b) { return b >= 0; });
    bytes += pages * plan.pools[plan.groups[g].pool].page_bytes *
             static_cast<int64_t>(plan.groups[g].tensors.size());
  }
  return bytes;
}

bool LLMEngine::abort_request(const std::string& request_id) {
  const auto it = requests_.find(request_id);
  if (it == requests_.end() || it->second->finished()) return false;
  finish(*it->second, FinishReason::Abort);
  aborted_.push_back(it->second.get());
  return true;
}

void LLMEngine::finish(Request& r, FinishReason reason) {
  scheduler_->finish(&r);
  r.finish_reason = reason;
  r.finish_time = Clock::now();
}

void LLMEngine::append_token(Request& r, const SampledToken& sampled) {
  const int32_t token = sampled.token;
  r.output_ids.push_back(token);
  if (r.params.logprobs >= 0) r.logprobs.push_back(sampled);
  if (r.output_ids.size() == 1) r.first_token_time = Clock::now();

  const bool is_eos = std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end();
  if (r.grammar) {
    // The mask allowed only this grammar's tokens, so this cannot fail
    // (a step whose masks allowed nothing samples kNoToken and never gets
    // here); a grammar that is done stops the output where it is.
    if (!r.grammar->accept_token(token) || r.grammar->is_terminated()) {
      finish(r, FinishReason::Stop);
      return;
    }
  }
  const auto& stop_ids = r.params.stop_token_ids;
  if ((is_eos && !r.params.ignore_eos) ||
      std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end()) {
    finish(r, FinishReason::Stop);  // the stop token's own text is not shown
    return;
  }
  const std::string piece = r.detokenizer->push(token);
  r.output_text += piece;
  if (const auto cut = r.stop_checker.find(r.output_text, piece.size())) {
    r.output_text.resize(*cut);
    finish(r, FinishReason::Stop);
    return;
  }
  // A complete grammar with no possible continuation: only EOS could
  // come next, so stop now rather than spend a step sampling it.
  const bool grammar_done = r.grammar && r.grammar->must_end();
  if (grammar_done || static_cast<int64_t>(r.output_ids.size()) >= r.params.max_tokens ||
      r.num_tokens() >= max_model_len_) {
    r.output_text += r.detokenizer->flush();
    if (const auto cut = r.stop_checker.find(r.output_text, r.output_text.size())) {
      r.output_text.resize(*cut);
      finish(r, FinishReason::Stop);
      return;
    }
    finish(r, grammar_done ? FinishReason::Stop : FinishReason::Length);
  }
}

RequestOutput LLMEngine::make_output(Request& r, size_t num_new_tokens) {
  // Delta outputs copy only what this step added (SamplingParams output_kind).
  const bool delta = r.params.output_kind == RequestOutputKind::Delta;
  RequestOutput out;
  out.request_id = r.request_id;
  if (!delta || r.output_ids.size() == num_new_tokens) out.prompt_ids = r.prompt_ids;
  out.new_token_ids.assign(r.output_ids.end() - static_cast<std::ptrdiff_t>(num_new_tokens),
                           r.output_ids.end());
  out.token_ids = delta ? out.new_token_ids : r.output_ids;
  // While running, hold back a tail that could still become a stop string.
  size_t visible = r.output_text.size();
  if (!r.finished()) visible -= std::min(visible, r.stop_checker.hold_back(r.output_text));
  visible = std::max(visible, r.num_text_bytes_sent);
  out.new_text = r.output_text.substr(r.num_text_bytes_sent, visible - r.num_text_bytes_sent);
  out.text = delta ? out.new_text : r.output_text.substr(0, visible);
  r.num_text_bytes_sent = visible;
  out.finished = r.finished();
  out.finish_reason = r.finish_reason;
  if (delta) {
    const size_t n = std::min(num_new_tokens, r.logprobs.size());
    out.logprobs.assign(r.logprobs.end() - static_cast<std::ptrdiff_t>(n), r.logprobs.end());
  } else {
    out.logprobs = r.logprobs;
  }
  if (r.prompt_logprobs && r.prompt_logprobs->complete()) out.prompt_logprobs = r.prompt_logprobs;

  RequestMetrics& m = out.metrics;
  m.num_prompt_tokens = static_cast<int64_t>(r.prompt_ids.size());
  m.num_cached_tokens = r.num_cached_tokens;
  m.num_output_tokens = static_cast<int64_t>(r.output_ids.size());
  m.num_preemptions = r.num_preemptions;
  if (!r.output_ids.empty()) {
    m.time_to_first_token_s = seconds_between(r.arrival_time, r.first_token_time);
  }
  if (r.finished()) {
    m.e2e_latency_s = seconds_between(r.arrival_time, r.finish_time);
    if (r.output_ids.size() > 1) {
      m.time_per_output_token_s = seconds_between(r.first_token_time, r.finish_time) /
                                  static_cast<double>(r.output_ids.size() - 1);
    }
  }
  return out;
}

double LLMEngine::proposer_model_seconds() const {
  return proposer_ ? proposer_->forward_seconds() : 0;
}

double LLMEngine::model_seconds() const {
  return runner_->forward_seconds() + (proposer_ ? proposer_->forward_seconds() : 0);
}

void LLMEngine::emit_output(std::vector<RequestOutput>& outputs, Request& r,
                            size_t num_new_tokens) {
  if (r.params.output_kind == RequestOutputKind::FinalOnly && !r.finished()) return;
  outputs.push_back(make_output(r, num_new_tokens));
}

void LLMEngine::score_prompt_rows(const SchedulerOutput& sched) {
  if (step_rows_.prompt_rows.empty()) return;
  // Entries are appended here, in order, then each row fills its own entry
  // in parallel (rows touch nothing else, so the split does not matter).
  prompt_row_tasks_.clear();
  for (const StepLogits::PromptRows& pr : step_rows_.prompt_rows) {
    Request& r = *sched.scheduled[pr.request].request;
    const size_t first = r.prompt_logprobs->extend(static_cast<size_t>(pr.count));
    PAGODA_CHECK(static_cast<int64_t>(first) == pr.first_entry,
                 "request {}: prompt logprob rows from entry {}, next entry is {}", r.request_id,
                 pr.first_entry, first);
    for (int64_t k = 0; k < pr.count; ++k) {
      prompt_row_tasks_.push_back(
          {&r, first + static_cast<size_t>(k), pr.first_row + static_cast<int32_t>(k)});
    }
  }
  const int64_t vocab = runner_->vocab_size();
  parallel_for(static_cast<int64_t>(prompt_row_tasks_.size()), 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const PromptRowTask& t = prompt_row_tasks_[static_cast<size_t>(i)];
      PromptLogprobs& lp = *t.request->prompt_logprobs;
      // Entry e scores prompt token e + 1 from the logits at position e.
      compute_prompt_logprob(std::span<const float>(runner_->logits_row(t.row), vocab),
                             t.request->prompt_ids[t.entry + 1], lp.top_n(), lp.slot(t.entry));
    }
  });
}

std::vector<RequestOutput> LLMEngine::step() {
  std::vector<RequestOutput> outputs;
  for (Request* r : aborted_) {
    emit_output(outputs, *r, 0);
    requests_.erase(r->request_id);
  }
  aborted_.clear();

  const SchedulerOutput sched = scheduler_->schedule();
  if (sched.empty()) return outputs;
  runner_->execute(sched, &step_rows_);
  scheduler_->on_step_done(sched);
  score_prompt_rows(sched);

  const auto rows = static_cast<int64_t>(step_rows_.sampling_rows.size());
  auto request_of = [&](int64_t i) -> Request& {
    return *sched.scheduled[step_rows_.sampling_requests[i]].request;
  };
  auto logits_of = [&](int64_t i) {
    return runner_->logits_row(static_cast<size_t>(step_rows_.sampling_rows[i]));
  };
  const int64_t vocab = runner_->vocab_size();
  if (logits_observer_) {
    for (int64_t i = 0; i < rows; ++i)
      logits_observer_(request_of(i).request_id, logits_of(i), vocab);
  }
  // Rows are sampled in parallel: each reads and edits only its own logits
  // and request (its rng included), so tokens do not depend on the split.
  // (32 rows of 151936 logits took ~1% of a decode step on one thread.)
  // A request that verifies drafts owns its k + 1 consecutive rows.
  sampled_.resize(static_cast<size_t>(rows));
  num_accepted_.assign(static_cast<size_t>(rows), 0);
  parallel_for(rows, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float*> spec_rows;
    for (int64_t i = i0; i < i1; ++i) {
      Request& r = request_of(i);
      std::vector<SampledToken>& tokens = sampled_[static_cast<size_t>(i)];
      tokens.clear();
      const int64_t num_spec = sched.scheduled[step_rows_.sampling_requests[i]].num_spec_tokens;
      // The stop ids matter only while min_tokens masks them (sample_token):
      // no list is built for the other steps.
      std::vector<int32_t> all_stop_ids;
      if (static_cast<int>(r.output_ids.size()) < r.params.min_tokens) {
        if (!r.params.ignore_eos) all_stop_ids = eos_ids_;
        all_stop_ids.insert(all_stop_ids.end(), r.params.stop_token_ids.begin(),
                            r.params.stop_token_ids.end());
      }
      if (num_spec == 0) {
        tokens.push_back(sample_token(std::span<float>(logits_of(i), vocab), r.params,
                                      r.prompt_ids, r.output_ids, all_stop_ids, r.rng,
                                      r.grammar.get()));
        continue;
      }
      spec_rows.clear();
      for (int64_t j = 0; j <= num_spec; ++j) spec_rows.push_back(logits_of(i) + j * vocab);
      VerifyInput in;
      in.rows = spec_rows;
      in.vocab_size = vocab;
      in.draft = std::span<const int32_t>(r.spec_token_ids).first(static_cast<size_t>(num_spec));
      in.params = &r.params;
      in.prompt_ids = r.prompt_ids;
      in.output_ids = r.output_ids;
      in.stop_ids = all_stop_ids;
      num_accepted_[static_cast<size_t>(i)] = verify_draft_tokens(in, r.rng, &tokens);
    }
  });
  std::vector<Request*> done, decoding;
  for (int64_t i = 0; i < rows; ++i) {
    Request& r = request_of(i);
    const int64_t num_spec = sched.scheduled[step_rows_.sampling_requests[i]].num_spec_tokens;
    size_t appended = 0;
    // Token by token, so a stop (EOS, stop string, max_tokens) inside the
    // accepted run ends the request there.
    for (const SampledToken& t : sampled_[static_cast<size_t>(i)]) {
      if (t.token == kNoToken) {  // the masks allowed nothing (sampler.h)
        finish(r, FinishReason::Stop);
        break;
      }
      append_token(r, t);
      ++appended;
      if (r.finished()) break;
    }
    if (num_spec > 0) {
      const int32_t accepted = num_accepted_[static_cast<size_t>(i)];
      spec_stats_.record(static_cast<int32_t>(num_spec), accepted);
      r.spec_adaptive.record(static_cast<int32_t>(num_spec), accepted,
                             spec_break_even_[static_cast<size_t>(num_spec)]);
      r.spec_token_ids.clear();
      if (!r.finished()) scheduler_->on_drafts_verified(&r, accepted);
    }
    emit_output(outputs, r, appended);
    if (r.finished()) {
      done.push_back(&r);
    } else {
      decoding.push_back(&r);
    }
  }
  // Finished requests leave the table before the proposer runs (a forward
  // pass that can throw) and stay alive until the step returns: the
  // schedule still points at them.
  std::vector<std::unique_ptr<Request>> finished;
  for (Request* r : done) {
    auto it = requests_.find(r->request_id);
    finished.push_back(std::move(it->second));
    requests_.erase(it);
  }
  if (proposer_) propose_drafts(sched, decoding);
  return outputs;
}

void LLMEngine::check_invariants() const {
  kv_->check_invariants();
  const int64_t bs = kv_->block_size();
  for (const auto& [id, request] : requests_) {
    const Request& r = *request;
    if (r.finished()) continue;
    PAGODA_CHECK(r.num_computed_tokens <= r.num_tokens(), "request {}: {} computed of {} tokens",
                 id, r.num_computed_tokens, r.num_tokens());
    PAGODA_CHECK(r.kv.num_cached_blocks * bs <= r.num_computed_tokens,
                 "request {}: {} cached blocks but {} computed tokens", id,
                 r.kv.num_cached_blocks, r.num_computed_tokens);
    // Positions a proposer's caches hold for this request: its tokens, then
    // at most its pending drafts; a cached block holds them for both models.
    const int64_t num_drafts = static_cast<int64_t>(r.spec_token_ids.size());
    if (proposer_keeps_kv_) {
      PAGODA_CHECK(r.num_proposer_computed_tokens <= r.num_tokens() + num_drafts,
                   "request {}: the proposer computed {} positions of {} tokens and {} drafts",
                   id, r.num_proposer_computed_tokens, r.num_tokens(), num_drafts);
      PAGODA_CHECK(r.kv.num_cached_blocks * bs <= r.num_proposer_computed_tokens,
                   "request {}: {} cached blocks but the proposer computed {} positions", id,
                   r.kv.num_cached_blocks, r.num_proposer_computed_tokens);
    }
    // The MTP layer's deferred hidden states (mtp_proposer.h) are gone from
    // a request that is waiting (preempted: recomputed), and none keeps
    // their memory once they are gone (a catch-up or a preemption frees
    // it: up to ~1.9 MB a request at V3's width).
    PAGODA_CHECK(r.status != RequestStatus::Waiting || r.mtp_deferred_hidden.empty(),
                 "request {}: waiting with {} floats of deferred MTP hidden states", id,
                 r.mtp_deferred_hidden.size());
    PAGODA_CHECK(!r.mtp_deferred_hidden.empty() || r.mtp_deferred_hidden.capacity() == 0,
                 "request {}: no deferred MTP hidden states but room kept for {} floats", id,
                 r.mtp_deferred_hidden.capacity());
    const std::vector<int32_t> tokens = r.all_tokens();
    const std::vector<BlockHash> want =
        hash_full_blocks(std::span<const int32_t>(tokens).first(static_cast<size_t>(
                             r.kv.block_hashes.size() * static_cast<size_t>(bs))),
                         static_cast<int32_t>(bs));
    PAGODA_CHECK(want == r.kv.block_hashes, "request {}: block hashes differ from its tokens'", id);
    // A proposer with caches fed all drafts but the last at their positions
    // (a model without drafts in flight holds pages for its tokens only).
    const int64_t positions =
        r.num_tokens() + (proposer_keeps_kv_ ? std::max<int64_t>(0, num_drafts - 1) : 0);
    for (size_t g = 0; g < r.kv.block_tables.size(); ++g) {
      const int64_t b = kv_->groups()[g].block_size;
      PAGODA_CHECK(static_cast<int64_t>(r.kv.block_tables[g].size()) <= (positions + b - 1) / b,
                   "request {}: group {} holds {} pages for {} tokens and {} drafts", id, g,
                   r.kv.block_tables[g].size(), r.num_tokens(), num_drafts);
    }
  }
}

int32_t LLMEngine::num_drafts_wanted(Request& r) {
  const int32_t k = options_.speculative_config->num_speculative_tokens;
  // A step of 1 + n tokens emits at most n + 1: drafts past max_tokens or
  // the context length could never be kept.
  const int64_t room =
      std::min<int64_t>(r.params.max_tokens - static_cast<int64_t>(r.output_ids.size()),
                        max_model_len_ - r.num_tokens()) - 1;
  if (room <= 0) return 0;
  // A constrained request does not speculate: its drafts would have to be
  // checked against the grammar and the matcher rolled back on rejection.
  if (r.grammar) return 0;
  if (options_.speculative_config->adaptive && !r.spec_adaptive.should_speculate()) return 0;
  return static_cast<int32_t>(std::min<int64_t>(k, room));
}

void LLMEngine::propose_drafts(const SchedulerOutput& sched,
                               const std::vector<Request*>& decoding) {
  proposals_.clear();
  // `decoding` follows the schedule's order (sampling rows do).
  size_t next = 0;
  for (const ScheduledRequest& s : sched.scheduled) {
    Request* r = s.request;
    if (r->finished()) continue;
    // Only a request that just got a token drafts; one still in its
    // prompt gets none.
    const bool sampled = next < decoding.size() && decoding[next] == r;
    if (sampled) ++next;
    proposals_.push_back({r, sampled ? num_drafts_wanted(*r) : 0});
  }
  PAGODA_CHECK(next == decoding.size(), "{} of {} decoding requests proposed for", next,
               decoding.size());
  proposer_->propose({proposals_, &sched});
  // The proposer's caches caught up: blocks both computed can be cached now.
  if (proposer_keeps_kv_) {
    for (const ProposalRequest& p : proposals_) scheduler_->cache_full_blocks(p.request);
  }
}

}  // namespace pagoda
