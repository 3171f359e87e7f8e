// Per-request switch that stops speculation where it does not pay.
//
// A verify step of 1 + k tokens costs more than a plain decode step of 1:
// on a CPU, decode is bound by reading the weights, so the step costs the
// weight bytes it reads over a plain step's (1 for a dense model, which
// reads every matrix once; more for a MoE model, whose extra tokens route
// to experts the first did not: CausalLM::expected_weight_bytes_per_step)
// plus, measured on the dense Qwen3-0.6B shape (bench/speculative_decoding.md),
// kVerifyCostPerDraftToken plain steps per extra row (its FLOPs, attention
// and sampling). A proposer that runs a model adds its passes' cost. A
// request that emits on average E tokens per verify step (1 + accepted
// drafts) gains only when E exceeds that cost: E is tracked as an
// exponential moving average, and below the break-even the request decodes
// without drafts, trying one verify step again every kReprobeInterval steps
// in case its text became repetitive (an n-gram match, a draft that now
// agrees).
#pragma once

#include <algorithm>
#include <cstdint>

namespace pagoda {

class AdaptiveSpeculation {
 public:
  // Measured: see bench/speculative_decoding.md ("break-even").
  static constexpr double kVerifyCostPerDraftToken = 0.06;
  static constexpr double kEmaWeight = 0.3;  // of the newest step
  static constexpr int32_t kReprobeInterval = 64;

  // The tokens per verify step of k drafts at which speculation pays, in
  // plain decode steps: the verify step's weight bytes over a plain step's
  // (verify_weight_ratio), its k extra rows, and k drafts of a proposer
  // whose drafts cost a share of a plain step each (a draft model's pass:
  // Proposer::cost_per_draft_token).
  static double break_even(int32_t k, double verify_weight_ratio = 1,
                           double proposer_cost_per_draft = 0) {
    return verify_weight_ratio + (kVerifyCostPerDraftToken + proposer_cost_per_draft) * k;
  }

  // Whether this step should draft for the request: true while it pays;
  // when off, every kReprobeInterval-th call probes again.
  bool should_speculate() {
    if (!off_) return true;
    if (++steps_off_ < kReprobeInterval) return false;
    steps_off_ = 0;
    return true;
  }
  // After a verify step of k drafts with `accepted` of them accepted, whose
  // break-even is `break_even_tokens` (break_even()).
  void record(int32_t k, int32_t accepted, double break_even_tokens) {
    if (!started_) {
      ema_tokens_ = std::max(ema_tokens_, std::min(break_even_tokens + kStartMargin, 1.0 + k));
      started_ = true;
    }
    ema_tokens_ = (1 - kEmaWeight) * ema_tokens_ + kEmaWeight * (1.0 + accepted);
    off_ = ema_tokens_ < break_even_tokens;
    steps_off_ = 0;
  }
  bool off() const { return off_; }
  double ema_tokens_per_step() const { return ema_tokens_; }

 private:
  // Starts at 2 tokens a step: a request that accepts nothing falls below
  // the break-even within a few verify steps (2, 1.7, 1.49, 1.34, 1.24, ...).
  // Where the break-even is near or above 2 (a MoE target, a costly draft)
  // it starts kStartMargin above it instead (at most at 1 + k: a break-even
  // above what a step can emit still stops a request at once): from 2, one
  // verify step of even 1 + k tokens could not lift it over a break-even
  // above 0.7 x 2 + 0.3 x (1 + k), and every request would stop at once.
  static constexpr double kStartMargin = 0.5;
  double ema_tokens_ = 2.0;
  bool started_ = false;
  bool off_ = false;
  int32_t steps_off_ = 0;
};

}  // namespace pagoda
