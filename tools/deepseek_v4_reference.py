#!/usr/bin/env python3
"""Independent float64 numpy reference of the DeepSeek-V4 forward pass
(DeepseekV4ForCausalLM), written from ../shared/research/
deepseek-attention-spec.md: §0.3 RoPE/YaRN, §0.4 weight dequantisation,
§0.5 Hadamard, §1.2/§1.3 config and layer pattern, §3.2.1 mHC, §3.2.2
attention, §3.2.3 compressor, §3.2.4 indexer, §3.2.6 MoE, §4.1 causality,
§4.3 decoder state. Exact mode (no activation/cache quantisation) unless
asked otherwise. Recomputes the whole sequence per call (`logits`), and has
a separate incremental decoder (V4Decoder: prefill P tokens, then one token
at a time with the §4.3 window ring and compressor state machine) used by
the self-test's decode == recompute check.

Semantics decided (spec sections in brackets; each also confirmed, by
reading only, against the official V4 inference model.py that spec §7
names: Sinkhorn order and eps placement, overlap halves and prefill state
load, window/compressed index rules, indexer weight scale, gate, clamp):
* Weights: FP8 e4m3 `X.weight` x E8M0 `X.scale` per 128x128 block; FP4
  `X.weight` I8 [out, in/2] (LOW nibble = even input column, e2m1 codes
  sign<<3 | {0,.5,1,1.5,2,3,4,6}) x E8M0 `X.scale` [out, in/32] [§0.4,
  §2.2]. Products of a power of two and an e4m3/e2m1 value are exact in
  f32. Everything then runs in float64.
* RoPE: interleaved pairs (v[2i], v[2i+1]) on the LAST qk_rope_head_dim
  dims of every rotated vector (q, window kv, compressed entries, indexer
  q and keys, inverse RoPE of the attention output) [§0.3 table]. Layers
  with compress_ratio > 0 use compress_rope_theta + YaRN (rope_scaling:
  factor, original_max_position_embeddings, beta_fast/slow) for the WHOLE
  layer (q, window kv, compressor, indexer); ratio 0 layers use
  rope_theta without YaRN. No YaRN mscale anywhere (neither on cos/sin nor
  on the softmax scale, which is head_dim^-0.5) [§0.3].
* mHC [§3.2.1]: u = flatten(X) over hc*dim, r = 1/sqrt(mean(u^2) +
  rms_norm_eps); m = (fn u) r; pre = sigmoid(m[:hc] s0 + b) + hc_eps,
  post = 2 sigmoid(m[hc:2hc] s1 + b), C = softmax_rows(m[2hc:] s2 + b) +
  hc_eps, then column normalisation, then (iters - 1) x (rows, columns),
  every divisor + hc_eps. X'[b] = post_b o + sum_a C[a][b] X[a]. Head:
  pre-only with hc_head_* then the final norm and head.
* Attention [§3.2.2, §4.1]: c_q = q_norm(wq_a a); q = wq_b c_q per head
  RMS-normalised without weight (eps rms_norm_eps), RoPE at t; kv =
  kv_norm(wkv a), RoPE at t; K = V = the head_dim entry; keys of query t:
  window kv_j, max(0, t-W+1) <= j <= t (W = sliding_window, inclusive),
  plus compressed entries i < floor((t+1)/r) (c4a: the indexer's top
  min(index_topk, floor((t+1)/4)); other r: all). One softmax with the
  per-head attn_sink logit (zero value). Inverse RoPE at t on the output's
  rope dims. Grouped output: heads in o_groups contiguous groups, wo_a
  viewed [G, o_lora, (H/G) head_dim], then wo_b.
* Compressor [§3.2.3], direct formula: overlap iff r == 4 (two column
  halves: previous window's first half, own window's second half; the
  previous window of entry 0 has logit -inf, value 0); S = wgate a +
  ape[t mod r]; softmax over candidates independently per dimension;
  RMSNorm (norm.weight); RoPE at the anchor i*r; indexer entries then
  Hadamard. Compressor input = the attention input a (after attn_norm).
* Indexer [§3.2.4]: qI = indexer.wq_b c_q [HI, DI], RoPE last dims at t,
  Hadamard; w = weights_proj(a) HI^-0.5 DI^-0.5; I(t,i) = sum_h w_h
  ReLU(qI_h . kI_i) over i < floor((t+1)/4); top-k by descending score,
  ties to the LOWER index (stable sort); continuous weights make ties
  improbable. No key LayerNorm. (Hadamard is orthonormal, so it does not
  change exact-mode scores; it is applied anyway.)
* MoE [§3.2.6]: sigma = sqrt(softplus(gate a)); layers < num_hash_layers
  pick tid2eid[token]; others top-k of sigma + bias (bias for selection
  only); weights sigma_e / sum sigma_E * routed_scaling_factor; routed
  expert: u = clamp(w3 a, -L, L), g = min(w1 a, L), w2(weight * silu(g) *
  u) with L = swiglu_limit; shared expert plain SwiGLU (official code; the
  clamp_shared option follows vLLM instead, spec §8.2).
* The MTP block (mtp.0.*) is loaded (and checked present) but not run.
* bf16_activations (engine avx512bf16 kernels, as deepseek_reference.py):
  inputs of products with BF16-stored matrices other than the router are
  rounded to bf16. bf16_kv: window kv and compressed main/indexer entries
  rounded to bf16 when stored.

CLI (as deepseek_reference.py):
  deepseek_v4_reference.py --model DIR --ids 1,2,3 [--out f.json|f.npy]
  deepseek_v4_reference.py --model DIR --ids ... --greedy N --out f.json
      `pagoda logits` JSON (one row per generated token)
  deepseek_v4_reference.py --model DIR --random T [--seed S] ...
  deepseek_v4_reference.py --self-test [--model DIR] [--quick | --long]
      spec §6.3 invariants 1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 13 (plus the
      FP8/FP4 weight dequantisation and the quantised-cache simulators) on fresh random tiny checkpoints (r = 16 and the
      real r = 128 variant), or on DIR. --long: the r = 128 variant at
      T = 260 with the block-boundary splits 255, 256, 257 added (~20 s)
  deepseek_v4_reference.py --model DIR --ids ... [--greedy N] --topk-out sets.json
      {"index_topk", "ids", "layers": {"1": [[compressed entry indices of
      query t, ascending] for t in 0..T-1], ...} (c4a layers only),
      "margins": {"1": [relative gap between the k-th and (k+1)-th indexer
      score of query t, null while every valid entry is selected], ...}}:
      compare an engine's sets as sets where the margin is clear
  deepseek_v4_reference.py --model DIR --random 200 --check-margins [--min-margin 1e-6]
      the smallest top-k margin per c4a layer; exits 1 below --min-margin
Options: --index-topk N, --clamp-shared, --bf16-kv, --bf16-activations,
--decode (compute the logits with the incremental decoder instead),
--fp8-cache (window/compressed entries as the 584-B fp8 entry: 448 nope
dims e4m3 with a ue8m0 scale per 64, rope dims bf16; JSON kv_cache_dtype
"fp8"), --indexer-cache fp4|fp8 (indexer keys MXFP4 / e4m3 + f32 scale;
JSON indexer_cache_dtype), --quant-sim (the official QAT simulation:
--fp8-cache + fp4 indexer keys + fp4 indexer queries).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

from safetensors_np import (bf16_bits_to_f32, e4m3_decode, e4m3_encode, e8m0_decode, f32_to_bf16_bits, load_dir,
                            load_dir_dtypes)

HERE = os.path.dirname(os.path.abspath(__file__))
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
ARCH = "DeepseekV4ForCausalLM"


def _bf16(x):
    return bf16_bits_to_f32(f32_to_bf16_bits(np.asarray(x, dtype=np.float32))).astype(np.float64)


def rope_inv_freq(d_r, base, yarn=None):
    """Spec §0.3: f_i = base^(-2i/d_r), YaRN-ramped when yarn = (factor, L0,
    beta_fast, beta_slow). Returns (inv_freq, (lo, hi) or None)."""
    i = np.arange(d_r // 2, dtype=np.float64)
    f = base ** (-2.0 * i / d_r)
    if not yarn:
        return f, None
    factor, L0, beta_fast, beta_slow = yarn

    def corr(n):
        return d_r * math.log(L0 / (n * 2 * math.pi)) / (2 * math.log(base))

    lo = max(math.floor(corr(beta_fast)), 0)
    hi = min(math.ceil(corr(beta_slow)), d_r - 1)
    hi_eff = hi + 0.001 if lo == hi else hi
    ramp = np.clip((i - lo) / (hi_eff - lo), 0.0, 1.0)
    return f * (1 - ramp) + (f / factor) * ramp, (lo, hi)


def rope_last(v, pos, inv_freq, inverse=False):
    """Interleaved RoPE (spec §0.3) on the LAST 2*len(inv_freq) dims of v
    [T, ..., d]; pos [T]. inverse: rotation by -angle."""
    rd = 2 * inv_freq.size
    ang = np.asarray(pos, dtype=np.float64)[:, None] * inv_freq[None, :]
    if inverse:
        ang = -ang
    shape = (len(pos),) + (1,) * (v.ndim - 2) + (inv_freq.size,)
    c, s = np.cos(ang).reshape(shape), np.sin(ang).reshape(shape)
    out = v.copy()
    a, b = v[..., -rd:][..., 0::2], v[..., -rd:][..., 1::2]
    r = np.empty(v.shape[:-1] + (rd,))
    r[..., 0::2] = a * c - b * s
    r[..., 1::2] = a * s + b * c
    out[..., -rd:] = r
    return out


def hadamard(n):
    """Sylvester Hadamard / sqrt(n) (spec §0.5)."""
    if n & (n - 1):
        raise ValueError(f"Hadamard size {n} is not a power of two")
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h / math.sqrt(n)


def fp8_sim(v, block, ue8m0=True):
    """Spec §0.4: per contiguous block of the last axis, s = max(amax,
    1e-4)/448 (ue8m0: 2^ceil(log2 s)), v' = e4m3_RNE(clamp(v/s, +-448)) s.
    A last partial block (width % block) gets its own scale: the tiny
    model's 48 nope dims are one block (the real 448 are 7 x 64)."""
    v = np.asarray(v, dtype=np.float64)
    out = np.empty_like(v)
    for b0 in range(0, v.shape[-1], block):
        g = v[..., b0 : b0 + block]
        s = np.maximum(np.abs(g).max(-1, keepdims=True), 1e-4) / 448.0
        s = np.exp2(np.ceil(np.log2(s))) if ue8m0 else s.astype(np.float32).astype(np.float64)
        out[..., b0 : b0 + block] = e4m3_decode(e4m3_encode(np.clip(g / s, -448.0, 448.0))).astype(np.float64) * s
    return out


def e2m1_round(x):
    """Nearest value of the e2m1 grid, ties to the even code, saturating at 6."""
    a = np.minimum(np.abs(x), 6.0)
    d = np.abs(a[..., None] - E2M1)
    best = np.argmin(d, axis=-1)
    nxt = np.minimum(best + 1, 7)
    tie = (nxt != best) & (np.take_along_axis(d, nxt[..., None], -1)[..., 0]
                           == np.take_along_axis(d, best[..., None], -1)[..., 0])
    best = np.where(tie & (best % 2 == 1), nxt, best)
    return np.where(np.signbit(x), -1.0, 1.0) * E2M1[best]


def fp4_sim(v, block=32):
    """Spec §0.4: per block s = 2^ceil(log2(max(amax, 6 2^-126)/6)),
    v' = e2m1_RNE(clamp(v/s, +-6)) s (MXFP4)."""
    sh = v.shape
    g = np.asarray(v, dtype=np.float64).reshape(sh[:-1] + (sh[-1] // block, block))
    s = np.exp2(np.ceil(np.log2(np.maximum(np.abs(g).max(-1, keepdims=True), 6 * 2.0 ** -126) / 6)))
    return (e2m1_round(np.clip(g / s, -6.0, 6.0)) * s).reshape(sh)


def topk_margin(scores, k):
    """Relative gap (I_k - I_k+1) / max|I| between the k-th and (k+1)-th
    largest indexer scores; None while every candidate is selected."""
    if scores.size <= k:
        return None
    row = np.sort(scores)[::-1]
    return float((row[k - 1] - row[k]) / max(np.max(np.abs(row)), 1e-300))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def silu(x):
    return x * sigmoid(x)


def colsoftmax(logits, values):
    """Per-dimension softmax over the candidate axis 0 (spec §3.2.3):
    sum_j P[j, f] values[j, f]; -inf logits weigh exactly 0."""
    m = np.max(logits, axis=0, keepdims=True)
    e = np.exp(logits - m)
    return np.sum(e * values, axis=0) / np.sum(e, axis=0)


def attend(q, keys, sink, scale):
    """One query [H, d] over keys [K, d] (K = V) with attention sink [H]
    (spec §3.2.2): sum exp(s - M) k / (sum exp(s - M) + exp(sink - M))."""
    s = (q @ keys.T) * scale
    M = np.maximum(s.max(axis=1) if keys.shape[0] else -np.inf, sink)
    e = np.exp(s - M[:, None])
    return (e @ keys) / (e.sum(axis=1) + np.exp(sink - M))[:, None]


def hc_coeffs(X, fn, base, scale, hc, iters, hc_eps, norm_eps):
    """mHC coefficients (spec §3.2.1) for X [T, hc, dim]: pre [T, hc],
    post [T, hc], C [T, hc(source a), hc(destination b)]."""
    T = X.shape[0]
    u = X.reshape(T, -1)
    r = 1.0 / np.sqrt(np.mean(u * u, axis=-1) + norm_eps)
    m = (u @ fn.T) * r[:, None]
    pre = sigmoid(m[:, :hc] * scale[0] + base[:hc]) + hc_eps
    post = 2.0 * sigmoid(m[:, hc:2 * hc] * scale[1] + base[hc:2 * hc])
    C = (m[:, 2 * hc:] * scale[2] + base[2 * hc:]).reshape(T, hc, hc)
    C = np.exp(C - C.max(axis=-1, keepdims=True))
    C = C / C.sum(axis=-1, keepdims=True) + hc_eps
    C = C / (C.sum(axis=1, keepdims=True) + hc_eps)  # columns
    for _ in range(iters - 1):
        C = C / (C.sum(axis=2, keepdims=True) + hc_eps)  # rows
        C = C / (C.sum(axis=1, keepdims=True) + hc_eps)  # columns
    return pre, post, C


def hc_post(o, X, post, C):
    """X'[b] = post_b o + sum_a C[a][b] X[a] (spec §3.2.1)."""
    return post[:, :, None] * o[:, None, :] + np.einsum("tab,tad->tbd", C, X)


def dequant_fp8(codes, scale_codes, block=128):
    v = e4m3_decode(codes)
    s = np.repeat(np.repeat(e8m0_decode(scale_codes), block, 0), block, 1)
    return (v * s[: v.shape[0], : v.shape[1]]).astype(np.float32)


def dequant_fp4(packed, scale_codes, block=32):
    """I8 [out, in/2] (low nibble first) x E8M0 [out, in/block] -> f32 [out, in]."""
    b = np.asarray(packed).astype(np.int64) & 0xFF
    codes = np.empty((b.shape[0], b.shape[1] * 2), dtype=np.int64)
    codes[:, 0::2], codes[:, 1::2] = b & 0xF, b >> 4
    v = np.where(codes & 8, -1.0, 1.0) * E2M1[codes & 7]
    return (v * np.repeat(e8m0_decode(scale_codes).astype(np.float64), block, 1)).astype(np.float32)


class DeepseekV4Reference:
    def __init__(self, model_dir, bf16_activations=False, bf16_kv=False, index_topk=None, clamp_shared=False,
                 dense_c4=False, hadamard_on=True, fp8_cache=False, indexer_cache=None, quant_sim=False,
                 absorbed=False):
        """index_topk: override; dense_c4: c4a layers attend to every valid
        compressed entry (bypass the indexer; spec §6.3 inv. 3 twin).
        fp8_cache: window kv and main compressed entries stored as the
        584-B entry of spec §5.1 (nope dims fp8_sim block 64 ue8m0, rope
        dims bf16). indexer_cache "fp4" (MXFP4, fp4_sim block 32) or "fp8"
        (e4m3 with one f32 scale amax/448 per key, the 132-B entry) for the
        indexer keys. quant_sim: the official QAT simulation (spec §0.4,
        §3.2.2-§3.2.4): fp8_cache + fp4 indexer keys + fp4 indexer q.
        absorbed: accepted for compare_logits.py, no meaning in V4."""
        self.fp8_cache = fp8_cache or quant_sim
        self.indexer_cache = "fp4" if quant_sim else indexer_cache
        self.fp4_q = quant_sim
        if self.indexer_cache not in (None, "fp4", "fp8"):
            raise ValueError(f"indexer_cache {indexer_cache!r}")
        self.cfg = c = json.load(open(os.path.join(model_dir, "config.json")))
        arch = (c.get("architectures") or [""])[0]
        if arch != ARCH:
            raise ValueError(f"{model_dir}: architecture {arch!r} is not {ARCH}")
        self.D, self.H, self.hd = c["hidden_size"], c["num_attention_heads"], c["head_dim"]
        self.rd = c["qk_rope_head_dim"]
        self.L = c["num_hidden_layers"]
        self.ratios = list(c["compress_ratios"])  # the stack's, then the MTP blocks'
        self.W = c["sliding_window"]
        self.G, self.ol = c["o_groups"], c["o_lora_rank"]
        self.HI, self.DI = c["index_n_heads"], c["index_head_dim"]
        self.index_topk = index_topk if index_topk is not None else c["index_topk"]
        self.hc, self.iters, self.hc_eps = c["hc_mult"], c["hc_sinkhorn_iters"], c["hc_eps"]
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.E, self.k = c["n_routed_experts"], c["num_experts_per_tok"]
        self.route_scale, self.limit = c["routed_scaling_factor"], c["swiglu_limit"]
        self.n_hash = c.get("num_hash_layers", 0)
        if c.get("scoring_func", "sqrtsoftplus") != "sqrtsoftplus":
            raise ValueError(f"scoring_func {c.get('scoring_func')!r}: only sqrtsoftplus is modelled")
        self.clamp_shared, self.dense_c4, self.hadamard_on, self.bf16_kv = clamp_shared, dense_c4, hadamard_on, bf16_kv
        rs = c.get("rope_scaling") or {}
        yarn = ((float(rs["factor"]), rs["original_max_position_embeddings"], rs.get("beta_fast", 32),
                 rs.get("beta_slow", 1)) if rs and rs.get("original_max_position_embeddings") else None)
        self.freq_swa, _ = rope_inv_freq(self.rd, c.get("rope_theta", 10000.0))
        self.freq_comp, self.yarn_range = rope_inv_freq(self.rd, c.get("compress_rope_theta", 160000.0), yarn)
        self.Hd = hadamard(self.DI)
        self.w, self.dtypes = self._load(model_dir)
        self.round_for = ({k for k, d in self.dtypes.items() if d == "BF16" and not k.endswith("ffn.gate.weight")}
                          if bf16_activations else set())
        self.trace = {}  # filled by forward: per-layer intermediates for the self-test

    # ---- weights (spec §0.4, §2.2) --------------------------------------
    def _load(self, model_dir):
        raw, dtypes = load_dir(model_dir, raw_fp8=True), load_dir_dtypes(model_dir)
        q = self.cfg.get("quantization_config")
        if q is not None and (q.get("quant_method") != "fp8" or q.get("weight_block_size", [128, 128]) != [128, 128]
                              or q.get("scale_fmt", "ue8m0") != "ue8m0"):
            raise ValueError(f"quantization_config {q!r} is not modelled")
        w = {}
        for name, arr in raw.items():
            if name.endswith(".scale"):
                continue
            dt = dtypes[name]
            if dt in ("F8_E4M3", "I8"):
                sname = name[: -len(".weight")] + ".scale"
                if sname not in raw or dtypes[sname] != "F8_E8M0":
                    raise ValueError(f"{name}: {dt} weight without an F8_E8M0 {sname}")
                s = raw[sname]
                if dt == "F8_E4M3":
                    want = (-(-arr.shape[0] // 128), -(-arr.shape[1] // 128))
                    if tuple(s.shape) != want:
                        raise ValueError(f"{sname}: shape {s.shape}, expected {want}")
                    w[name] = dequant_fp8(arr, s)
                else:
                    if tuple(s.shape) != (arr.shape[0], arr.shape[1] * 2 // 32):
                        raise ValueError(f"{sname}: shape {s.shape} does not match FP4 {name} {arr.shape}")
                    w[name] = dequant_fp4(arr, s)
            elif dt == "F8_E8M0":
                raise ValueError(f"{name}: stray E8M0 tensor")
            else:
                w[name] = arr
        for i in range(self.cfg.get("num_nextn_predict_layers", 0)):
            if f"mtp.{i}.e_proj.weight" not in w:
                raise ValueError(f"MTP block mtp.{i} missing")
        return w, dtypes

    def W_(self, name):
        return self.w[name].astype(np.float64)

    def _mm(self, x, name):
        """x @ W[name].T in float64 (W stored [out, in]); large matrices are
        widened in row blocks (the --wide checkpoint's head)."""
        if name in self.round_for:
            x = _bf16(x)
        w = self.w[name]
        step = max(1, (1 << 24) // w.shape[1])
        if w.shape[0] <= step:
            return x @ w.astype(np.float64).T
        return np.concatenate([x @ w[r : r + step].astype(np.float64).T for r in range(0, w.shape[0], step)], axis=-1)

    def _rms(self, x, weight=None):
        y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps)
        return y if weight is None else y * weight

    def _norm(self, x, name):
        return self._rms(x, self.W_(name))

    def lp(self, layer):
        """The tensor prefix of block `layer`: the stack's, then the MTP blocks'."""
        return f"layers.{layer}." if layer < self.L else f"mtp.{layer - self.L}."

    def freq(self, layer):
        return self.freq_comp if self.ratios[layer] else self.freq_swa

    def _kvround(self, v):
        """A window kv / main compressed entry as the cache holds it."""
        if self.fp8_cache:
            return np.concatenate([fp8_sim(v[..., : -self.rd], 64), _bf16(v[..., -self.rd :])], axis=-1)
        return _bf16(v) if self.bf16_kv else v

    def _idxround(self, v):
        """An indexer key as the cache holds it."""
        if self.indexer_cache == "fp4":
            return fp4_sim(v, 32)
        if self.indexer_cache == "fp8":
            return fp8_sim(v, v.shape[-1], ue8m0=False)
        return _bf16(v) if self.bf16_kv else v

    # ---- attention pieces (spec §3.2.2 - §3.2.4) ------------------------
    def attn_qkv(self, a, layer, pos):
        """c_q [T, q_lora], q [T, H, hd] (per-head RMS, RoPE), kv [T, hd] (RoPE)."""
        p, f = self.lp(layer) + "attn.", self.freq(layer)
        c_q = self._norm(self._mm(a, p + "wq_a.weight"), p + "q_norm.weight")
        q = self._rms(self._mm(c_q, p + "wq_b.weight").reshape(len(pos), self.H, self.hd))
        q = rope_last(q, pos, f)
        kv = rope_last(self._norm(self._mm(a, p + "wkv.weight"), p + "kv_norm.weight"), pos, f)
        return c_q, q, self._kvround(kv)

    def comp_AS(self, a, prefix, r, pos):
        """Compressor projections (spec §3.2.3): A = wkv a, S = wgate a + ape[t mod r]."""
        A = self._mm(a, prefix + "wkv.weight")
        S = self._mm(a, prefix + "wgate.weight") + self.W_(prefix + "ape")[np.asarray(pos) % r]
        return A, S

    def comp_finish(self, chat, prefix, anchor, layer, rotate):
        """RMSNorm, RoPE at the anchor i*r, Hadamard for the indexer (spec §3.2.3)."""
        e = rope_last(self._norm(chat[None, :], prefix + "norm.weight"), [anchor], self.freq(layer))[0]
        if rotate:
            return self._idxround(e @ self.Hd if self.hadamard_on else e)
        return self._kvround(e)

    def comp_direct(self, A, S, r, d, prefix, layer, rotate, n=None):
        """Entries 0..n-1 (default floor(T/r)) by the direct formula of §3.2.3."""
        n = A.shape[0] // r if n is None else n
        out = np.zeros((n, d))
        for i in range(n):
            own = slice(i * r, (i + 1) * r)
            if r == 4:  # overlap: previous window's first half, own window's second half
                if i == 0:
                    pv, ps = np.zeros((r, d)), np.full((r, d), -np.inf)
                else:
                    pv, ps = A[(i - 1) * r : i * r, :d], S[(i - 1) * r : i * r, :d]
                vals = np.concatenate([pv, A[own, d:]])
                logits = np.concatenate([ps, S[own, d:]])
            else:
                vals, logits = A[own], S[own]
            out[i] = self.comp_finish(colsoftmax(logits, vals), prefix, i * r, layer, rotate)
        return out

    def indexer_q(self, c_q, a, layer, pos):
        p = self.lp(layer) + "attn.indexer."
        qI = rope_last(self._mm(c_q, p + "wq_b.weight").reshape(len(pos), self.HI, self.DI), pos, self.freq(layer))
        if self.hadamard_on:
            qI = qI @ self.Hd
        if self.fp4_q:
            qI = fp4_sim(qI, 32)
        wI = self._mm(a, p + "weights_proj.weight") * (self.HI ** -0.5) * (self.DI ** -0.5)
        return qI, wI

    @staticmethod
    def indexer_scores(qI_t, wI_t, kI):
        """I(i) = sum_h w_h ReLU(qI_h . kI_i) for one query (spec §3.2.4)."""
        return np.maximum(qI_t @ kI.T, 0.0).T @ wI_t if kI.shape[0] else np.zeros(0)

    def topk(self, scores):
        k = min(self.index_topk, scores.size)
        return np.sort(np.argsort(-scores, kind="stable")[:k])

    def out_proj(self, o, layer):
        """Grouped low-rank output (spec §3.2.2): o [T, H, hd] -> [T, dim]."""
        p = self.lp(layer) + "attn."
        T = o.shape[0]
        og = o.reshape(T, self.G, self.H // self.G * self.hd)
        wa = self.W_(p + "wo_a.weight").reshape(self.G, self.ol, -1)
        if p + "wo_a.weight" in self.round_for:
            og = _bf16(og)
        z = np.einsum("tgi,goi->tgo", og, wa).reshape(T, self.G * self.ol)
        return self._mm(z, p + "wo_b.weight")

    def attention(self, a, layer, pos0=0, entry_override=None):
        """Full-sequence attention of layer `layer` (direct compressor) over
        a [T, dim] at positions pos0..pos0+T-1 (pos0 = 0 for a model run).
        entry_override(main_entries) -> main_entries: test hook (NaN test)."""
        T = a.shape[0]
        pos = np.arange(pos0, pos0 + T)
        p = self.lp(layer) + "attn."
        r = self.ratios[layer]
        c_q, q, kv = self.attn_qkv(a, layer, pos)
        tr = self.trace.setdefault(layer, {})
        tr.update(a=a, kv=kv)
        main = np.zeros((0, self.hd))
        if r:
            A, S = self.comp_AS(a, p + "compressor.", r, pos)
            main = self.comp_direct(A, S, r, self.hd, p + "compressor.", layer, False)
            tr.update(main=main, A=A, S=S)
            if r == 4:
                AI, SI = self.comp_AS(a, p + "indexer.compressor.", 4, pos)
                kI = self.comp_direct(AI, SI, 4, self.DI, p + "indexer.compressor.", layer, True)
                qI, wI = self.indexer_q(c_q, a, layer, pos)
                tr.update(kI=kI, AI=AI, SI=SI, sets=[], margins=[])
        if entry_override is not None:
            main = entry_override(main)
        sink, scale = self.W_(p + "attn_sink"), self.hd ** -0.5
        o = np.zeros((T, self.H, self.hd))
        for t in range(T):
            keys = kv[max(0, t - self.W + 1) : t + 1]
            if r:
                n = (t + 1) // r  # §4.1: entry i visible iff (i+1) r <= t+1
                sel = np.arange(n)
                if r == 4 and not self.dense_c4:
                    sc = self.indexer_scores(qI[t], wI[t], kI[:n])
                    sel = self.topk(sc)
                    tr["sets"].append(sel)
                    tr.setdefault("margins", []).append(topk_margin(sc, self.index_topk))
                keys = np.concatenate([keys, main[sel]])
            o[t] = attend(q[t], keys, sink, scale)
        o = rope_last(o, pos, self.freq(layer), inverse=True)
        return self.out_proj(o, layer)

    # ---- MoE (spec §3.2.6) ---------------------------------------------
    def route(self, a, ids, layer, prefix=None):
        p = prefix or self.lp(layer) + "ffn."
        z = a @ self.W_(p + "gate.weight").T
        sig = np.sqrt(np.logaddexp(0.0, z))
        if p + "gate.tid2eid" in self.w:
            sel = self.w[p + "gate.tid2eid"][np.asarray(ids)].astype(np.int64)
        else:
            biased = sig + self.W_(p + "gate.bias")
            sel = np.argsort(-biased, axis=-1, kind="stable")[:, : self.k]
        ws = np.take_along_axis(sig, sel, -1)
        return sel, ws / ws.sum(-1, keepdims=True) * self.route_scale, sig

    def expert(self, a, p, clamp):
        g, u = self._mm(a, p + "w1.weight"), self._mm(a, p + "w3.weight")
        if clamp:
            u = np.clip(u, -self.limit, self.limit)
            g = np.minimum(g, self.limit)
        return silu(g) * u

    def moe(self, a, ids, layer):
        p = self.lp(layer) + "ffn."
        sel, wts, sig = self.route(a, ids, layer)
        self.trace.setdefault(layer, {}).update(sel=sel, wts=wts, sig=sig, ffn_in=a)
        y = np.zeros_like(a)
        for e in range(self.E):
            rows, slot = np.nonzero(sel == e)
            if rows.size:
                h = self.expert(a[rows], p + f"experts.{e}.", True) * wts[rows, slot][:, None]
                y[rows] += self._mm(h, p + f"experts.{e}.w2.weight")
        if p + "shared_experts.w1.weight" in self.w:
            y += self._mm(self.expert(a, p + "shared_experts.", self.clamp_shared), p + "shared_experts.w2.weight")
        return y

    # ---- blocks -------------------------------------------------------
    def hc_coeffs(self, X, prefix, which):
        return hc_coeffs(X, self.W_(prefix + f"hc_{which}_fn"), self.W_(prefix + f"hc_{which}_base"),
                         self.W_(prefix + f"hc_{which}_scale"), self.hc, self.iters, self.hc_eps, self.eps)

    def head(self, X, prefix=""):
        T = X.shape[0]
        u = X.reshape(T, -1)
        r = 1.0 / np.sqrt(np.mean(u * u, axis=-1) + self.eps)
        m = (u @ self.W_(prefix + "hc_head_fn").T) * r[:, None]
        pre = sigmoid(m * self.W_(prefix + "hc_head_scale")[0] + self.W_(prefix + "hc_head_base")) + self.hc_eps
        y = np.einsum("tk,tkd->td", pre, X)
        return self._mm(self._norm(y, prefix + "norm.weight"), "head.weight")

    def layer(self, X, ids, i, attn_fn):
        p = self.lp(i)
        pre, post, C = self.hc_coeffs(X, p, "attn")
        a = self._norm(np.einsum("tk,tkd->td", pre, X), p + "attn_norm.weight")
        X = hc_post(attn_fn(a), X, post, C)
        pre, post, C = self.hc_coeffs(X, p, "ffn")
        f = self._norm(np.einsum("tk,tkd->td", pre, X), p + "ffn_norm.weight")
        return hc_post(self.moe(f, ids, i), X, post, C)

    def embed(self, ids):
        e = self.w["embed.weight"][np.asarray(ids)].astype(np.float64)
        return np.repeat(e[:, None, :], self.hc, axis=1)

    def streams(self, ids):
        """Final streams X [T, hc, dim] of the full sequence; per-layer
        outputs in self.trace[i]['X']."""
        self.trace = {}
        X = self.embed(ids)
        for i in range(self.L):
            X = self.layer(X, ids, i, lambda a, i=i: self.attention(a, i))
            self.trace[i]["X"] = X
        return X

    def forward(self, ids):
        return self.head(self.streams(ids))

    logits = forward

    def greedy(self, prompt_ids, n):
        dec = V4Decoder(self)
        last = dec.prefill(list(prompt_ids))[-1]
        out = []
        for _ in range(n):
            out.append(int(np.argmax(last)))
            last = dec.step(out[-1])
        return out


    # ---- MTP (spec §3.2.7) ----------------------------------------------
    def mtp_block(self, tokens, prev_X, pos):
        """The MTP block's output streams [T, hc, dim] for the pairs
        (prev_X[t]: the main model's final streams at position pos[t], before
        hc_head; tokens[t]: the token at pos[t] + 1) at positions pos =
        0..T-1, attending causally to each other through the block's window:
        X0 = h_proj(hnorm(each stream)) + e_proj(enorm(Embed(token)))
        broadcast over the streams (the embedding zeroed at position 0, as
        vLLM does), then the block (SWA attention, biased MoE, own hc params)."""
        if not self.cfg.get("num_nextn_predict_layers"):
            raise ValueError("the checkpoint has no MTP block (num_nextn_predict_layers 0)")
        L, p = self.L, self.lp(self.L)
        if self.ratios[L]:
            raise ValueError(f"MTP block ratio {self.ratios[L]}: spec §3.2.7 has SWA only")
        tokens = np.asarray(tokens, dtype=np.int64)
        e = self.w["embed.weight"][tokens].astype(np.float64)
        e[np.asarray(pos) == 0] = 0.0
        x0 = self._mm(self._norm(prev_X, p + "hnorm.weight"), p + "h_proj.weight")
        x0 = x0 + self._mm(self._norm(e, p + "enorm.weight"), p + "e_proj.weight")[:, None, :]
        return self.layer(x0, tokens, L, lambda a: self.attention(a, L))

    def mtp_head(self, X):
        """Logits from MTP streams: its own hc_head and norm, the shared head."""
        return self.head(X, prefix=self.lp(self.L))

    def mtp_logits(self, ids):
        """[len(ids) - 1, vocab]: row t predicts token t + 2 from (X_t, ids[t+1])."""
        ids = np.asarray(ids, dtype=np.int64)
        X = self.streams(ids)
        return self.mtp_head(self.mtp_block(ids[1:], X[:-1], np.arange(len(ids) - 1)))

    def mtp_propose(self, ids, k):
        """k greedy drafts after ids, chaining the MTP block (draft j + 1 from
        the block's own output streams at the previous position and draft
        j); also the logits row of each."""
        ids = np.asarray(ids, dtype=np.int64)
        X = self.streams(ids)
        tokens, prev = list(ids[1:]), list(X[:-1])
        drafts, rows = [], []
        for _ in range(k):
            x = self.mtp_block(np.array(tokens), np.array(prev), np.arange(len(tokens)))
            row = self.mtp_head(x[-1:])[0]
            d = int(np.argmax(row))
            drafts.append(d)
            rows.append(row)
            tokens.append(d)
            prev.append(x[-1])
        return drafts, rows


class CompressorStateMachine:
    """Spec §4.3: rolling (value, logit) slots; start: values 0, logits
    -inf; prefill of P tokens emits entries directly and loads the tail
    (P mod r current tokens; for r = 4 the last complete window's tokens as
    the previous slots); decode writes slot p mod r and emits at (p+1) mod r
    == 0 (overlap: previous slots' first half with current slots' second
    half, then current -> previous)."""

    def __init__(self, r, d, finish):
        self.r, self.d, self.overlap, self.finish = r, d, r == 4, finish
        cd = (2 if self.overlap else 1) * d
        self.cur_v, self.cur_s = np.zeros((r, cd)), np.full((r, cd), -np.inf)
        self.prev_v, self.prev_s = np.zeros((r, cd)), np.full((r, cd), -np.inf)
        self.entries = []

    def load_prefill(self, A, S, entries):
        P, r = A.shape[0], self.r
        self.entries = [e for e in entries]
        cut = P - P % r
        for j in range(cut, P):
            self.cur_v[j % r], self.cur_s[j % r] = A[j], S[j]
        if self.overlap and P >= 4:
            self.prev_v, self.prev_s = A[cut - 4 : cut].copy(), S[cut - 4 : cut].copy()

    def step(self, p, A_p, S_p):
        r, d = self.r, self.d
        self.cur_v[p % r], self.cur_s[p % r] = A_p, S_p
        if (p + 1) % r:
            return None
        if self.overlap:
            vals = np.concatenate([self.prev_v[:, :d], self.cur_v[:, d:]])
            logits = np.concatenate([self.prev_s[:, :d], self.cur_s[:, d:]])
        else:
            vals, logits = self.cur_v, self.cur_s
        e = self.finish(colsoftmax(logits, vals), p + 1 - r)
        self.entries.append(e)
        if self.overlap:
            self.prev_v, self.prev_s = self.cur_v.copy(), self.cur_s.copy()
        return e


class V4Decoder:
    """Incremental V4 (spec §4.3): per layer a window ring of W slots (slot
    = position mod W), the main and indexer compressed lists and their
    compressor state machines. prefill(ids) runs the full-sequence path and
    loads the state; step(token) runs one token: window insert and
    compressor/indexer updates before attention."""

    def __init__(self, m):
        self.m, self.n = m, 0

    def prefill(self, ids):
        m = self.m
        self.ids = list(ids)
        logits = m.forward(ids) if ids else np.zeros((0, m.cfg["vocab_size"]))
        P = len(ids)
        self.n = P
        self.state = []
        for i in range(m.L):
            r, p = m.ratios[i], f"layers.{i}.attn."
            tr = m.trace.get(i, {})
            st = {"ring": np.zeros((m.W, m.hd)), "ring_pos": np.full(m.W, -1)}
            for j in range(max(0, P - m.W), P):
                st["ring"][j % m.W], st["ring_pos"][j % m.W] = tr["kv"][j], j
            if r:
                st["main"] = CompressorStateMachine(
                    r, m.hd, lambda c, anc, i=i, p=p: m.comp_finish(c, p + "compressor.", anc, i, False))
                if P:
                    st["main"].load_prefill(tr["A"], tr["S"], tr["main"])
            if r == 4:
                st["idx"] = CompressorStateMachine(
                    4, m.DI, lambda c, anc, i=i, p=p: m.comp_finish(c, p + "indexer.compressor.", anc, i, True))
                if P:
                    st["idx"].load_prefill(tr["AI"], tr["SI"], tr["kI"])
            self.state.append(st)
        return logits

    def _attn_step(self, a, i, t):
        m, st, r, p = self.m, self.state[i], self.m.ratios[i], f"layers.{i}.attn."
        pos = [t]
        c_q, q, kv = m.attn_qkv(a, i, pos)
        st["ring"][t % m.W], st["ring_pos"][t % m.W] = kv[0], t
        keys = st["ring"][(st["ring_pos"] >= 0) & (st["ring_pos"] > t - m.W)]
        if r:
            A, S = m.comp_AS(a, p + "compressor.", r, pos)
            st["main"].step(t, A[0], S[0])
            main = np.array(st["main"].entries).reshape(-1, m.hd)
            sel = np.arange(main.shape[0])
            if r == 4:
                AI, SI = m.comp_AS(a, p + "indexer.compressor.", 4, pos)
                st["idx"].step(t, AI[0], SI[0])
                kI = np.array(st["idx"].entries).reshape(-1, m.DI)
                if not m.dense_c4:
                    qI, wI = m.indexer_q(c_q, a, i, pos)
                    sel = m.topk(m.indexer_scores(qI[0], wI[0], kI))
            keys = np.concatenate([keys, main[sel]])
        o = attend(q[0], keys, m.W_(p + "attn_sink"), m.hd ** -0.5)[None]
        o = rope_last(o, pos, m.freq(i), inverse=True)
        return m.out_proj(o, i)

    def step(self, token):
        m, t = self.m, self.n
        self.ids.append(token)
        X = m.embed([token])
        self.layer_out = []
        for i in range(m.L):
            X = m.layer(X, [token], i, lambda a, i=i: self._attn_step(a, i, t))
            self.layer_out.append(X[0])
        self.n += 1
        return m.head(X)[0]


# ---- self-test (spec §6.3) --------------------------------------------------
def _write(out, *args):
    subprocess.run([sys.executable, os.path.join(HERE, "make_deepseek_v4_checkpoint.py"), "--out", out, *args],
                   check=True)


def self_test(model_dir=None, quick=False, long=False):
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    rng = np.random.default_rng(0)
    # 13: RoPE layout: interleaved pairs (2i, 2i+1) on the LAST rd dims.
    f, rr = rope_inv_freq(16, 160000.0, (4.0, 4096, 32, 1))
    check(rr == (2, 5), f"YaRN range for d_r 16, base 160000, L0 4096: {rr} (spec §6.2: lo 2, hi 5)")
    pos = np.arange(30)
    e = np.zeros((30, 64))
    e[:, 48 + 2] = 1.0
    r = rope_last(e, pos, f)
    check(np.allclose(r[:, 50], np.cos(pos * f[1])) and np.allclose(r[:, 51], np.sin(pos * f[1]))
          and np.count_nonzero(np.delete(r, [50, 51], axis=1)) == 0, "RoPE: pairs (2i, 2i+1) of the last 16 dims")
    e2 = np.zeros((30, 64))
    e2[:, 5] = 1.0
    check(np.array_equal(rope_last(e2, pos, f), e2), "RoPE leaves the nope dims (first head_dim - rd) alone")
    v = rng.standard_normal((30, 3, 64))
    check(np.allclose(rope_last(rope_last(v, pos, f), pos, f, inverse=True), v, atol=1e-13), "inverse RoPE")
    # 7: shift invariance of attention with inverse RoPE on the output.
    qc, kc, sink = rng.standard_normal((4, 64)), rng.standard_normal((9, 64)), rng.standard_normal(4)
    kp = np.arange(20, 29)

    def shifted(d):
        q = rope_last(qc[None], [28 + d], f)[0]
        k = rope_last(kc, kp + d, f)
        return rope_last(attend(q, k, sink, 0.125)[None], [28 + d], f, inverse=True)[0]

    check(np.max(np.abs(shifted(0) - shifted(137))) < 1e-12, "RoPE/inverse RoPE: output invariant to a shift (inv. 7)")
    # 9: sink.
    o = attend(qc, kc, np.full(4, -np.inf), 0.125)
    s = qc @ kc.T * 0.125
    pl = np.exp(s - s.max(1, keepdims=True))
    check(np.allclose(o, (pl / pl.sum(1, keepdims=True)) @ kc, atol=1e-14), "sink = -inf is plain softmax (inv. 9)")
    o = attend(qc, kc, sink, 0.125)
    check(np.all(np.linalg.norm(o, axis=1) <= np.linalg.norm(kc, axis=1).max() + 1e-12), "|o_h| <= max |key| (inv. 9)")
    o_big = attend(qc, kc, np.full(4, 50.0), 0.125)
    check(np.max(np.abs(o_big)) < 1e-15 * 1e3, "a huge sink drives the output to 0")
    # quantisation simulators (spec §0.4)
    x = np.array([[0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, -0.25, -0.3, 0.26, -5.0] + [0.0] * 20])
    y = fp4_sim(x)  # amax 7 -> s = 2^ceil(log2(7/6)) = 2; x/s rounded to the e2m1 grid, ties to even
    check(np.array_equal(y[0, :12], [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 8.0, -0.0, -0.0, 0.0, -4.0]),
          f"fp4_sim: e8m0 scale per 32, e2m1 round-to-nearest-even ({y[0, :12].tolist()})")
    v = rng.standard_normal((3, 64 * 3))
    q8 = fp8_sim(v, 64)
    sc = np.exp2(np.ceil(np.log2(np.abs(v.reshape(3, 3, 64)).max(-1) / 448)))
    codes = (q8.reshape(3, 3, 64) / sc[..., None])
    check(np.array_equal(e4m3_decode(e4m3_encode(codes)), codes) and np.all(np.abs(q8 - v) <= np.abs(v) / 16 + 1e-12),
          "fp8_sim: ue8m0 scale per 64, e4m3 values, relative error <= 2^-4")
    # 10: mHC.
    hcn, dim = 4, 32
    X = rng.standard_normal((5, hcn, dim))
    fn = rng.standard_normal((24, hcn * dim)) / math.sqrt(hcn * dim)
    base, sc = 0.3 * rng.standard_normal(24), 0.5 + rng.random(3)
    pre, post, C = hc_coeffs(X, fn, base, sc, hcn, 20, 1e-6, 1e-6)
    dev = max(np.max(np.abs(C.sum(1) - 1)), np.max(np.abs(C.sum(2) - 1)))
    check(dev < 1e-3, f"mHC: C doubly stochastic after 20 iterations (worst {dev:.1e})")
    check(np.all(pre > 1e-6) and np.all(pre < 1 + 1e-6) and np.all(post > 0) and np.all(post < 2), "mHC ranges")
    pre0, post0, C0 = hc_coeffs(X, np.zeros_like(fn), base, sc, hcn, 20, 1e-6, 1e-6)
    pre1, post1, C1 = hc_coeffs(X * 3 + 1, np.zeros_like(fn), base, sc, hcn, 20, 1e-6, 1e-6)
    # by hand, scalar loops
    hp = [1 / (1 + math.exp(-base[k])) + 1e-6 for k in range(4)]
    hq = [2 / (1 + math.exp(-base[4 + k])) for k in range(4)]
    M = [[math.exp(base[8 + 4 * a_ + b_]) for b_ in range(4)] for a_ in range(4)]
    M = [[M[a_][b_] / sum(M[a_]) + 1e-6 for b_ in range(4)] for a_ in range(4)]
    for it in range(20):
        if it:
            M = [[M[a_][b_] / (sum(M[a_]) + 1e-6) for b_ in range(4)] for a_ in range(4)]
        cs = [sum(M[a_][b_] for a_ in range(4)) + 1e-6 for b_ in range(4)]
        M = [[M[a_][b_] / cs[b_] for b_ in range(4)] for a_ in range(4)]
    check(np.allclose(pre0, pre1) and np.allclose(C0, C1) and np.allclose(pre0[0], hp) and np.allclose(post0[0], hq)
          and np.allclose(C0[0], np.array(M), rtol=1e-12), "mHC with fn = 0: input-independent, = hand-computed values")
    eye = np.broadcast_to(np.eye(4), (5, 4, 4))
    check(np.array_equal(hc_post(rng.standard_normal((5, dim)), X, np.zeros((5, 4)), eye), X),
          "hc_post with post = 0, C = I returns the streams")

    with tempfile.TemporaryDirectory() as tmp:
        if model_dir:
            variants = [(model_dir, None)]
        else:
            _write(f"{tmp}/r16", "--dtype", "f32", "--seed", "3")
            variants = [(f"{tmp}/r16", 40)]
            if not quick:
                _write(f"{tmp}/r128", "--dtype", "f32", "--seed", "4", "--real-ratio")
                variants.append((f"{tmp}/r128", 260 if long else 132))
            # dequantisation: FP8 / FP4 weights are the quantised f32 weights of the same seed
            _write(f"{tmp}/q", "--dtype", "f32", "--seed", "3", "--fp8", "--fp4-experts")
            wf = load_dir(f"{tmp}/r16")
            mq = DeepseekV4Reference(f"{tmp}/q")
            for name, kind in (("layers.1.attn.wq_b.weight", "fp8"), ("layers.2.ffn.experts.3.w2.weight", "fp4"),
                               ("layers.0.ffn.experts.0.w1.weight", "fp4")):
                x = wf[name].astype(np.float64)
                got = mq.w[name].astype(np.float64)
                if kind == "fp8":
                    s = np.exp2(np.ceil(np.log2(np.maximum(np.abs(x).max(), 1e-4) / 448)))  # one 128x128 block each
                    ok = np.all(np.abs(got - x) <= np.abs(x) * 2 ** -4 + s * 2 ** -9)
                else:
                    g = x.reshape(x.shape[0], -1, 32)
                    s = np.exp2(np.ceil(np.log2(np.maximum(np.abs(g).max(-1), 6 * 2.0 ** -126) / 6)))[..., None]
                    grid = np.concatenate([-E2M1[::-1], E2M1])
                    near = grid[np.argmin(np.abs((g / s)[..., None] - grid), axis=-1)]
                    ok = np.array_equal(got.reshape(g.shape), near * s)
                check(bool(ok), f"{kind} dequantisation of {name} is the quantised f32 weight")
            lf = DeepseekV4Reference(f"{tmp}/r16").forward([5, 9, 300, 7])
            lq = mq.forward([5, 9, 300, 7])
            rel = np.max(np.abs(lq - lf)) / np.max(np.abs(lf))
            check(rel < 0.5 and np.all(np.isfinite(lq)),
                  f"FP8+FP4 checkpoint runs, logits near the f32 one ({rel:.2e})")
        for mdir, T in variants:
            model_checks(mdir, T or 40, check, rng, quick)
    n_ok = "all" if not failures else f"{len(failures)} FAILED"
    print(f"deepseek_v4_reference self-test: {n_ok}")
    return 1 if failures else 0


def model_checks(mdir, T, check, rng, quick):
    m = DeepseekV4Reference(mdir)
    tag = f"[{os.path.basename(mdir)} ratios {m.ratios}]"
    ids = [int(x) for x in rng.integers(0, m.cfg["vocab_size"], T)]
    full = m.forward(ids)
    tr = m.trace
    scale = np.max(np.abs(full))
    check(np.all(np.isfinite(full)), f"{tag} finite logits")
    _, _, C = m.hc_coeffs(m.embed(ids), "layers.0.", "attn")
    dev = max(np.max(np.abs(C.sum(1) - 1)), np.max(np.abs(C.sum(2) - 1)))
    check(dev < 1e-3, f"{tag} layer 0 mHC C doubly stochastic within {dev:.1e} (inv. 10)")
    # 2: compressor direct vs state machine, every prefill length, overlap and not.
    for i in sorted({i for i, r in enumerate(m.ratios) if r}, key=lambda i: m.ratios[i])[:: 1]:
        r, p = m.ratios[i], f"layers.{i}.attn."
        jobs = [("compressor.", tr[i]["A"], tr[i]["S"], tr[i]["main"], m.hd, False)]
        if r == 4:
            jobs.append(("indexer.compressor.", tr[i]["AI"], tr[i]["SI"], tr[i]["kI"], m.DI, True))
        for sub, A, S, direct, d, rot in jobs:
            worst = 0.0
            fin = (lambda c, anc, sub=sub, rot=rot: m.comp_finish(c, p + sub, anc, i, rot))
            for P in range(T + 1):
                sm = CompressorStateMachine(r, d, fin)
                sm.load_prefill(A[:P], S[:P], m.comp_direct(A[:P], S[:P], r, d, p + sub, i, rot))
                for t in range(P, T):
                    sm.step(t, A[t], S[t])
                got = np.array(sm.entries).reshape(-1, d)
                if got.shape != direct.shape:
                    worst = np.inf
                    break
                worst = max(worst, float(np.max(np.abs(got - direct))) if got.size else 0.0)
            check(worst < 1e-12, f"{tag} layer {i} {sub[:-1]} r={r}: state machine == direct for every prefill "
                  f"length 0..{T} ({direct.shape[0]} entries, worst {worst:.1e}) (inv. 2)")
        # 5 (finer): entry dependencies by perturbation of the compressor input.
        A, S = tr[i]["A"], tr[i]["S"]
        dep_ok = True
        for j in (0, 3, r, min(T - 1, 2 * r + 1)):
            a2 = tr[i]["a"].copy()
            a2[j] += 1.0
            A2, S2 = m.comp_AS(a2, p + "compressor.", r, np.arange(T))
            e2 = m.comp_direct(A2, S2, r, m.hd, p + "compressor.", i, False)
            changed = np.any(e2 != tr[i]["main"], axis=1)
            lo_i, hi_i = j // r, (j // r + 1 if r == 4 else j // r)  # c4: entries i with 4i-4 <= j <= 4i+3
            want = np.zeros(len(changed), bool)
            want[lo_i : min(hi_i, len(changed) - 1) + 1] = True
            dep_ok &= bool(np.array_equal(changed, want))
        check(dep_ok, f"{tag} layer {i} r={r}: entry i depends only on its tokens "
              f"({'[4i-4, 4i+3]' if r == 4 else '[ri, ri+r-1]'}) (inv. 5)")
        # 5: entries not yet visible are never read (NaN harness).
        n = tr[i]["main"].shape[0]
        if n:
            def nan_last(e, k=n - 1):
                e = e.copy()
                e[k] = np.nan
                return e
            out = m.attention(tr[i]["a"], i, entry_override=nan_last)
            first = n * r - 1  # the token completing entry n-1
            ok = np.all(np.isfinite(out[:first])) and (r == 4 or np.all(np.isnan(out[first:])))
            check(bool(ok), f"{tag} layer {i}: NaN in entry {n - 1} reaches no query t < {first} (inv. 5)")
    # 6: window at an SWA layer.
    i0 = m.ratios.index(0)
    a0 = tr[i0]["a"]
    base = m.attention(a0, i0)
    j = 2
    a2 = a0.copy()
    a2[j] += 1.0
    d = np.any(m.attention(a2, i0) != base, axis=1)
    want = np.zeros(T, bool)
    want[j : j + m.W] = True
    check(np.array_equal(d, want), f"{tag} SWA layer {i0}: output at t depends on tokens t-W+1..t only (inv. 6)")
    # 11: MoE.
    moe_ok, hash_ok, bias_moved, clamp_seen = True, True, False, False
    for i in range(m.L):
        sel, wts, sig = tr[i]["sel"], tr[i]["wts"], tr[i]["sig"]
        moe_ok &= bool(np.allclose(wts.sum(-1), m.route_scale, rtol=1e-13))
        moe_ok &= bool(np.allclose(wts, np.take_along_axis(sig, sel, -1) /
                                   np.take_along_axis(sig, sel, -1).sum(-1, keepdims=True) * m.route_scale))
        if i < m.n_hash:
            hash_ok &= bool(np.array_equal(sel, m.w[f"layers.{i}.ffn.gate.tid2eid"][ids].astype(np.int64)))
        else:
            unb = np.sort(np.argsort(-sig, axis=-1, kind="stable")[:, : m.k], -1)
            bias_moved |= bool(np.any(unb != np.sort(sel, -1)))
        u = tr[i]["ffn_in"] @ np.concatenate([m.W_(f"layers.{i}.ffn.experts.{e}.w3.weight") for e in range(m.E)]).T
        clamp_seen |= bool(np.any(np.abs(u) > m.limit))
    check(moe_ok, f"{tag} MoE weights from unbiased sigma, sum to routed_scaling_factor (inv. 11)")
    check(hash_ok, f"{tag} hash layers pick exactly tid2eid[token] (inv. 11)")
    check(bias_moved, f"{tag} the gate bias changes some selections (inv. 11)")
    check(clamp_seen, f"{tag} swiglu clamp active (|w3 a| > swiglu_limit occurs) (inv. 11)")
    # 3: top-k saturation.
    c4 = [i for i, r in enumerate(m.ratios) if r == 4]
    if c4:
        sparse = any(len(s) < (t + 1) // 4 for i in c4 for t, s in enumerate(tr[i]["sets"]))
        check(sparse, f"{tag} c4a top-k is sparse somewhere (index_topk {m.index_topk} < floor((t+1)/4))")
        big = DeepseekV4Reference(mdir, index_topk=10 ** 9).forward(ids)
        dense = DeepseekV4Reference(mdir, dense_c4=True).forward(ids)
        check(np.max(np.abs(big - dense)) / scale < 1e-13 and np.max(np.abs(big - full)) / scale > 1e-9,
              f"{tag} index_topk >= floor((t+1)/4) == attending every valid entry (inv. 3)")
        nh = DeepseekV4Reference(mdir, hadamard_on=False).forward(ids)
        check(np.max(np.abs(nh - full)) / scale < 1e-12, f"{tag} indexer with/without Hadamard agree (inv. 8)")
    # 5: causality by perturbation, end to end.
    s_ = T // 2 + 1
    ids2 = list(ids)
    ids2[s_] = (ids2[s_] + 1) % m.cfg["vocab_size"]
    pert = m.forward(ids2)
    check(np.array_equal(pert[:s_], full[:s_]) and np.all(np.any(pert[s_:] != full[s_:], axis=1)),
          f"{tag} changing token {s_} changes exactly the logits at t >= {s_} (inv. 5)")
    # 1: decode == recompute.
    r_ = max(m.ratios)
    extra = (255, 256, 257) if T > 257 else ()  # 256-position KV blocks (spec §5.4)
    splits = sorted({x for x in (1, 2, 3, 4, 5, r_ - 1, r_, r_ + 1, m.W - 1, m.W, m.W + 1, T) + extra if 0 < x <= T})
    if quick:
        splits = [x for x in splits if x in (1, r_ + 1, m.W, T)]
    worst, worst_layer = 0.0, 0.0
    ref_X = [tr[i]["X"] for i in range(m.L)]
    for P in splits:
        dec = V4Decoder(m)
        rows = list(dec.prefill(ids[:P]))
        for t in range(P, T):
            rows.append(dec.step(ids[t]))
            for i in range(m.L):
                worst_layer = max(worst_layer, float(np.max(np.abs(dec.layer_out[i] - ref_X[i][t]))
                                                     / np.max(np.abs(ref_X[i][t]))))
        worst = max(worst, float(np.max(np.abs(np.array(rows) - full)) / scale))
    check(worst < 1e-12 and worst_layer < 1e-12, f"{tag} decode == recompute for prefill splits {splits}, T={T}: "
          f"logits worst {worst:.1e}, per-layer streams worst {worst_layer:.1e} (inv. 1)")
    # Quantised caches (spec §0.4, §5.1): the fp8 entry keeps its rope dims in
    # bf16 and its nope dims on a per-64 ue8m0 e4m3 grid; decode == recompute
    # holds there too (a rounding flip between the [T, dim] and [1, dim]
    # products would show as ~1e-3, not ~1e-15).
    mq = DeepseekV4Reference(mdir, quant_sim=True)
    qfull = mq.forward(ids)
    kv = mq.trace[0]["kv"]
    bw = min(64, m.hd - m.rd)  # tiny: one 48-wide block
    sc = np.exp2(np.ceil(np.log2(np.maximum(np.abs(kv[:, : -m.rd]).reshape(T, -1, bw).max(-1), 1e-4) / 448)))
    nope = kv[:, : -m.rd].reshape(T, -1, bw) / sc[..., None]
    check(np.array_equal(e4m3_decode(e4m3_encode(nope)), nope) and np.array_equal(_bf16(kv[:, -m.rd:]), kv[:, -m.rd:]),
          f"{tag} quant-sim: window entries = e4m3 x ue8m0 per 64 nope dims + bf16 rope dims")
    rel = np.max(np.abs(qfull - full)) / scale
    check(0 < rel < 0.5, f"{tag} quant-sim logits differ from exact by {rel:.1e} (relative to max |logit|)")
    worst = 0.0
    for P in [x for x in splits if x in (1, r_ + 1, m.W, T)]:
        dec = V4Decoder(mq)
        rows = list(dec.prefill(ids[:P])) + [dec.step(ids[t]) for t in range(P, T)]
        worst = max(worst, float(np.max(np.abs(np.array(rows) - qfull)) / scale))
    check(worst < 1e-9, f"{tag} quant-sim: decode == recompute (worst {worst:.1e}) (inv. 1)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model")
    ap.add_argument("--ids", help="comma-separated token ids")
    ap.add_argument("--random", type=int, default=0, help="T random token ids instead of --ids")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--greedy", type=int, default=0, help="also generate N greedy tokens (teacher forcing after)")
    ap.add_argument("--out", help="write logits: .npy [T, vocab] or .json")
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--quick", action="store_true", help="self-test: r=16 variant and fewer splits only")
    ap.add_argument("--long", action="store_true", help="self-test: r=128 variant at T=260, splits 255..257 too")
    ap.add_argument("--index-topk", type=int, default=None)
    ap.add_argument("--clamp-shared", action="store_true", help="swiglu clamp on the shared expert too (vLLM)")
    ap.add_argument("--bf16-kv", action="store_true")
    ap.add_argument("--bf16-activations", action="store_true")
    ap.add_argument("--topk-out", help="write the c4a layers' per-query top-k sets and margins (JSON)")
    ap.add_argument("--check-margins", action="store_true", help="report the c4a top-k score margins")
    ap.add_argument("--min-margin", type=float, default=1e-6)
    ap.add_argument("--decode", action="store_true", help="logits from the incremental decoder (prefill 1 + steps)")
    ap.add_argument("--fp8-cache", action="store_true", help="584-B fp8 window/compressed entries (spec §5.1)")
    ap.add_argument("--indexer-cache", choices=["fp4", "fp8"], help="indexer keys as MXFP4 (68 B) or fp8 (132 B)")
    ap.add_argument("--quant-sim", action="store_true", help="official QAT simulation (fp8 kv, fp4 indexer q/k)")
    a = ap.parse_args()
    if a.self_test:
        return self_test(a.model, a.quick, a.long)
    if not a.model or not (a.ids or a.random):
        ap.error("--model and --ids (or --random T) are required (or --self-test)")
    m = DeepseekV4Reference(a.model, bf16_activations=a.bf16_activations, bf16_kv=a.bf16_kv,
                            index_topk=a.index_topk, clamp_shared=a.clamp_shared, fp8_cache=a.fp8_cache,
                            indexer_cache=a.indexer_cache, quant_sim=a.quant_sim)
    if a.random:
        ids = [int(t) for t in np.random.default_rng(a.seed).integers(0, min(512, m.cfg["vocab_size"]), a.random)]
    else:
        ids = [int(t) for t in a.ids.split(",") if t.strip()]
    if a.check_margins:
        m.forward(ids)
        worst = np.inf
        for i, tr in sorted(m.trace.items()):
            g = np.array([x for x in tr.get("margins", []) if x is not None])
            if g.size:
                worst = min(worst, float(g.min()))
                print(f"layer {i}: {g.size} queries past index_topk {m.index_topk}: min relative margin "
                      f"{g.min():.3e}, median {np.median(g):.3e}, below 1e-4: {int(np.sum(g < 1e-4))}")
        print(f"min relative top-k margin {worst:.3e} (limit {a.min_margin:.0e})")
        return 0 if worst >= a.min_margin else 1
    out_ids = m.greedy(ids, a.greedy) if a.greedy else []
    if a.topk_out:
        m.forward(ids + out_ids)
        json.dump({"index_topk": m.index_topk, "ids": ids + out_ids,
                   "layers": {str(i): [s.tolist() for s in tr["sets"]] for i, tr in m.trace.items() if "sets" in tr},
                   "margins": {str(i): tr["margins"] for i, tr in m.trace.items() if "sets" in tr}},
                  open(a.topk_out, "w"))
    if a.decode:
        dec = V4Decoder(m)
        seq = ids + out_ids
        logits = np.array(list(dec.prefill(seq[:1])) + [dec.step(t) for t in seq[1:]])
    else:
        logits = m.forward(ids + out_ids)
    if a.greedy:
        doc = {"prompt_ids": ids, "output_ids": out_ids, "logits": logits[len(ids) - 1 : -1].tolist()}
    else:
        doc = {"prompt_ids": ids, "output_ids": [], "logits": logits.tolist()}
    doc.update(reference="deepseek_v4_reference.py",
               kv_cache_dtype="fp8" if m.fp8_cache else "bf16" if a.bf16_kv else "f32")
    if m.indexer_cache:
        doc["indexer_cache_dtype"] = m.indexer_cache
    if a.out and a.out.endswith(".npy"):
        np.save(a.out, logits)
    elif a.out:
        json.dump(doc, open(a.out, "w"))
    for t, row in enumerate(logits):
        print(f"{t}\ttoken {(ids + out_ids)[t]}\targmax {int(np.argmax(row))}\tmax|logit| {np.max(np.abs(row)):.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
