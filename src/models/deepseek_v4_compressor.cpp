#include "models/deepseek_v4_compressor.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "models/deepseek_indexer.h"
#include "models/linear_weights.h"

namespace pagoda {

Compressor::Compressor(WeightStore& weights, const std::string& prefix, int64_t hidden,
                       int64_t ratio, int64_t dim, int64_t rope_dim,
                       const std::vector<float>* inv_freq, float eps, bool rotate,
                       const WeightOptions& options)
    : ratio_(ratio),
      dim_(dim),
      width_((ratio == 4 ? 2 : 1) * dim),
      rope_dim_(rope_dim),
      overlap_(ratio == 4),
      rotate_(rotate),
      eps_(eps),
      inv_freq_(inv_freq) {
  wkv_ = prepare_linear(weights, weights.matrix(prefix + "wkv.weight", width_, hidden), options);
  wgate_ = prepare_linear(weights, weights.matrix(prefix + "wgate.weight", width_, hidden), options);
  // ape [ratio, width]: the learned per-slot position bias of the logits.
  const ops::Matrix ape = weights.matrix(prefix + "ape", ratio, width_);
  ape_.resize(static_cast<size_t>(ratio * width_));
  for (int64_t r = 0; r < ratio; ++r) matrix_row_f32(ape, r, ape_.data() + r * width_);
  norm_ = weights.vector(prefix + "norm.weight", dim);
}

int64_t Compressor::run(const float* a, const BatchMetadata& batch,
                        const KVGroupMetadata& state_group, const PagedRows& state,
                        int64_t tokens, std::vector<float>& entries,
                        std::vector<int32_t>& entry_rows) {
  const int64_t w = width_, d = dim_, r = ratio_;
  kv_.resize(static_cast<size_t>(tokens * w));
  gate_.resize(kv_.size());
  ops::linear(a, tokens, wkv_, nullptr, kv_.data());
  ops::linear(a, tokens, wgate_, nullptr, gate_.data());
  // State rows first: a window completed in this step may start in it.
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t slot = state_group.slot_mapping[t];
    if (slot < 0) continue;
    auto* row = reinterpret_cast<float*>(state.at_slot(slot));
    const float* ape = ape_.data() + (batch.positions[t] % r) * w;
    std::memcpy(row, kv_.data() + t * w, w * sizeof(float));
    for (int64_t f = 0; f < w; ++f) row[w + f] = gate_[t * w + f] + ape[f];
  }
  entries.clear();
  entry_rows.clear();
  anchors_.clear();
  const ops::AttentionBatch ab = attention_batch(batch, state_group);
  std::vector<const float*> cand_values, cand_logits;
  std::vector<double> mx(d), den(d), num(d);
  for (int32_t s = 0; s < batch.num_seqs(); ++s) {
    const int32_t* table = ab.block_table(s);
    for (int32_t t = batch.query_start_loc[s]; t < batch.query_start_loc[s + 1]; ++t) {
      const int64_t pos = batch.positions[t];
      if ((pos + 1) % r != 0) continue;
      const int64_t i = pos / r;
      // Candidates: (value, logit) column ranges of the window's rows
      // (spec §3.2.3); entry 0 of an overlapping compressor has no
      // previous window (its logits are -inf: no weight).
      cand_values.clear();
      cand_logits.clear();
      if (overlap_ && i > 0) {
        for (int64_t p = (i - 1) * r; p < i * r; ++p) {
          const auto* row = reinterpret_cast<const float*>(state.at(table, p));
          cand_values.push_back(row);
          cand_logits.push_back(row + w);
        }
      }
      const int64_t half = overlap_ ? d : 0;  // own window: the second half when overlapping
      for (int64_t p = i * r; p <= pos; ++p) {
        const auto* row = reinterpret_cast<const float*>(state.at(table, p));
        cand_values.push_back(row + half);
        cand_logits.push_back(row + w + half);
      }
      // Softmax over the candidates, independently for every dimension.
      std::fill(mx.begin(), mx.end(), -INFINITY);
      for (const float* l : cand_logits) {
        for (int64_t f = 0; f < d; ++f) mx[f] = std::max(mx[f], double{l[f]});
      }
      std::fill(den.begin(), den.end(), 0.0);
      std::fill(num.begin(), num.end(), 0.0);
      for (size_t c = 0; c < cand_logits.size(); ++c) {
        for (int64_t f = 0; f < d; ++f) {
          const double e = std::exp(cand_logits[c][f] - mx[f]);
          den[f] += e;
          num[f] += e * cand_values[c][f];
        }
      }
      const size_t at = entries.size();
      entries.resize(at + d);
      for (int64_t f = 0; f < d; ++f) entries[at + f] = static_cast<float>(num[f] / den[f]);
      entry_rows.push_back(t);
      anchors_.push_back(static_cast<int32_t>(i * r));
    }
  }
  const auto n = static_cast<int64_t>(entry_rows.size());
  if (n == 0) return 0;
  ops::rms_norm(entries.data(), norm_, n, d, eps_, entries.data());
  ops::RopeParams rp;
  rp.num_heads = 1;
  rp.head_dim = static_cast<int>(d);
  rp.offset = static_cast<int>(d - rope_dim_);
  rp.rot_dim = static_cast<int>(rope_dim_);
  rp.layout = ops::RopeLayout::Interleaved;
  ops::rope(entries.data(), n, anchors_.data(), inv_freq_->data(), rp);
  if (rotate_) hadamard_rotate(entries.data(), n, d);
  return n;
}

}  // namespace pagoda
