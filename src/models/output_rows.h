// The rows of a batch whose outputs are wanted, as a batch of their own.
//
// DeepSeek's MTP layer (CausalLM::mtp_forward) writes its cache entry at
// every row of a pass, since later positions read it, but only the rows
// whose logits are used (batch.logits_indices: the last position of a
// request that drafts) need the rest of the block: attention, the FFN and
// the head. The model writes the caches over the whole batch, then runs
// the rest over this batch, where each such row is a one-token sequence
// that reads its request's cache through its block-table row up to its own
// position (the cache already holds the whole pass's entries). Attention
// and every other per-row op give a row the same bits whatever its
// sequence computes around it (ops.h), so the outputs are the full pass's.
#pragma once

#include <cstdint>

#include "models/model.h"

namespace pagoda {

// Sets `out` to the rows batch.logits_indices of `batch` (strictly
// increasing) as one-token sequences: their token ids, positions, slots
// and block-table rows (the tables copied), seq_lens position + 1, and
// logits_indices 0 .. rows - 1. `out`'s vectors are reused.
void output_rows_batch(const BatchMetadata& batch, BatchMetadata& out);

// Moves rows `rows` (strictly increasing, as output_rows_batch takes them)
// of `data` [.., width] to its first rows, in order.
void gather_rows(float* data, int64_t width, const std::vector<int32_t>& rows);

}  // namespace pagoda
