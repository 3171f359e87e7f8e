#!/usr/bin/env python3
"""Independent float64 numpy reference of the DeepSeek-V3 forward pass
(DeepseekV3ForCausalLM: MLA + MoE, bf16/f32 or FP8 block-scaled weights),
written from ../shared/research/deepseek-attention-spec.md (§0.3 RoPE/YaRN,
§0.4 FP8 dequantisation, §3.1.1 block, §3.1.2 MLA, §3.1.4 MoE) and checked
against the Hugging Face transformers / vLLM DeepseekV3 semantics (read
only to confirm them; nothing copied). Like tools/reference_model.py it
recomputes the whole sequence on every call (no cache).

Semantics decided (see the notes at each function):
* RoPE on q_pe / k_pe uses INTERLEAVED pairs (v[2i], v[2i+1]) (spec §0.3).
  HF's DeepseekV3 (rope_interleave=True) first permutes the rope slice to
  (even dims, odd dims) and then applies the NeoX rotate_half rotation with
  cos(cat(f, f)): that is the interleaved rotation followed by the same
  permutation of q_pe and k_pe, so every q_pe.k_pe dot product, and hence
  the output, is identical (the self-test checks it).
* YaRN frequencies per §0.3 (= HF/vLLM yarn_find_correction_range +
  linear ramp). cos/sin are multiplied by
  yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim)
  and the softmax scale is (nope+rope)^-0.5 * yarn_get_mscale(factor,
  mscale_all_dim)^2 when mscale_all_dim is set, with
  yarn_get_mscale(s, m) = 1 if s <= 1 else 0.1 * m * ln(s) + 1 (HF
  DeepseekV3 / vLLM DeepseekScalingRotaryEmbedding). YaRN applies whenever
  rope_scaling is present (types "yarn" and "deepseek_yarn" are the same
  thing for this model). `factor` is read from rope_scaling (some
  transformers versions derive it as max_position_embeddings /
  original_max_position_embeddings; our writer keeps the two equal).
* MoE noaux_tc routing per §3.1.4: sigmoid (or softmax) scores, bias added
  for selection only, group score = sum of the top-2 biased scores of the
  group, the topk_group best groups kept (others -inf), top-k experts by
  biased score, weights from the UNBIASED scores, renormalised when
  norm_topk_prob (denominator + 1e-20 as HF), times routed_scaling_factor;
  plus the shared experts. Layer i is MoE iff i >= first_k_dense_replace
  and i % moe_layer_freq == 0.
* FP8: weight = f32(float(e4m3) * f32 scale_inv) per 128x128 block (one f32
  product, bit-exact with a C++ kernel doing the same), then float64.
* The MTP layer (model.layers.{num_hidden_layers}) is loaded but not run.
* RMSNorm eps: rms_norm_eps for every norm, q_a/kv_a_layernorm included (as
  vLLM; HF's DeepseekV3 builds those two with its default 1e-6; the writer
  uses 1e-6, where both agree).
* DeepseekV32ForCausalLM is accepted without its indexer, i.e. as dense MLA,
  which is exact only for T <= index_topk (spec §3.1.3); longer inputs are
  refused.

CLI:
  deepseek_reference.py --model DIR --ids 1,2,3 [--absorbed] [--bf16-kv] [--out f.json|f.npy]
      logits of every position: .npy [T, vocab] float64, or JSON
      {"prompt_ids", "output_ids": [], "logits": [[...] x T]}
  deepseek_reference.py --model DIR --ids 1,2,3 --greedy 32 --out f.json
      also generates 32 greedy tokens; the JSON then has `pagoda logits`'s
      format (one row per generated token), so compare_logits.py accepts it;
      .npy holds all T + 32 rows
  deepseek_reference.py --self-test [--model DIR]
      the spec §6.3 invariants on a fresh random checkpoint (or on DIR)
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

from safetensors_np import (bf16_bits_to_f32, e4m3_decode, f32_to_bf16_bits, fp8_block_dequantize, load_dir,
                            load_dir_dtypes)

HERE = os.path.dirname(os.path.abspath(__file__))


def _bf16(x):
    """x rounded to f32, then to bf16 (nearest even), back as float64."""
    return bf16_bits_to_f32(f32_to_bf16_bits(np.asarray(x, dtype=np.float32))).astype(np.float64)


def yarn_get_mscale(scale, mscale):
    """HF/vLLM DeepseekV3: 1 for scale <= 1, else 0.1 * mscale * ln(scale) + 1."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_params(cfg):
    """(inv_freq [d_r/2], cos/sin multiplier, softmax scale, (lo, hi)) per
    spec §0.3 with HF's mscale handling (module docstring)."""
    d = cfg["qk_rope_head_dim"]
    base = cfg.get("rope_theta", 10000.0)
    i = np.arange(d // 2, dtype=np.float64)
    f = base ** (-2.0 * i / d)
    scale = (cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]) ** -0.5
    rs = cfg.get("rope_scaling")
    if not rs:
        return f, 1.0, scale, None
    kind = rs.get("type", rs.get("rope_type"))
    if kind not in ("yarn", "deepseek_yarn"):
        raise ValueError(f"rope_scaling type {kind!r} is not DeepSeek's YaRN")
    factor, L0 = float(rs["factor"]), rs["original_max_position_embeddings"]
    beta_fast, beta_slow = rs.get("beta_fast", 32), rs.get("beta_slow", 1)

    def corr(n):  # dimension index whose wavelength makes n rotations over L0
        return d * math.log(L0 / (n * 2 * math.pi)) / (2 * math.log(base))

    lo = max(math.floor(corr(beta_fast)), 0)
    hi = min(math.ceil(corr(beta_slow)), d - 1)
    hi_eff = hi + 0.001 if lo == hi else hi
    ramp = np.clip((i - lo) / (hi_eff - lo), 0.0, 1.0)
    f = f * (1 - ramp) + (f / factor) * ramp  # high-frequency dims kept, low-frequency dims / factor
    m, m_all = rs.get("mscale", 1.0), rs.get("mscale_all_dim", 0.0)
    cos_mult = yarn_get_mscale(factor, m) / yarn_get_mscale(factor, m_all)
    if m_all:
        scale *= yarn_get_mscale(factor, m_all) ** 2
    return f, cos_mult, scale, (lo, hi)


def rope_interleaved(v, pos, inv_freq, mult=1.0):
    """Spec §0.3 interleaved (GPT-J) RoPE on the last axis of v [T, ..., d_r]:
    pairs (v[2i], v[2i+1]) rotated by angle pos * f_i; cos/sin scaled by mult."""
    ang = pos.astype(np.float64)[:, None] * inv_freq[None, :]  # [T, d_r/2]
    shape = (len(pos),) + (1,) * (v.ndim - 2) + (inv_freq.size,)
    c, s = (np.cos(ang) * mult).reshape(shape), (np.sin(ang) * mult).reshape(shape)
    a, b = v[..., 0::2], v[..., 1::2]
    out = np.empty_like(v)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = a * s + b * c
    return out


def rope_hf_deinterleave(v, pos, inv_freq, mult=1.0):
    """HF transformers' DeepseekV3 form (used by the self-test only): permute
    the rope slice to (even dims, odd dims), then NeoX rotate_half with
    cos(cat(f, f)). Equals rope_interleaved up to that permutation."""
    v = np.concatenate([v[..., 0::2], v[..., 1::2]], axis=-1)
    ang = pos.astype(np.float64)[:, None] * inv_freq[None, :]
    ang = np.concatenate([ang, ang], axis=-1)
    shape = (len(pos),) + (1,) * (v.ndim - 2) + (ang.shape[-1],)
    c, s = (np.cos(ang) * mult).reshape(shape), (np.sin(ang) * mult).reshape(shape)
    h = v.shape[-1] // 2
    rot = np.concatenate([-v[..., h:], v[..., :h]], axis=-1)
    return v * c + rot * s


class DeepseekReference:
    def __init__(self, model_dir, bf16_activations=False, bf16_kv=False, absorbed=False):
        """bf16_activations: activations are rounded to bf16 before every
        product with a BF16-stored matrix (as tools/reference_model.py does
        for the engine's avx512bf16 kernels; FP8 matrices are not rounded).
        bf16_kv: the latent cache entries (c_kv after kv_a_layernorm, k_pe
        after RoPE) are rounded to bf16 before attention reads them, in
        both attention forms. absorbed: attention in the absorbed form."""
        self.cfg = c = json.load(open(os.path.join(model_dir, "config.json")))
        arch = (c.get("architectures") or [""])[0]
        if arch not in ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM"):
            raise ValueError(f"{model_dir}: architecture {arch!r} is not DeepSeek V3")
        self.bf16_kv, self.absorbed = bf16_kv, absorbed
        self.w, self.dtypes = self._load(model_dir)
        # The engine decides routing in f32 (spec §3.1.4: the router's
        # logits are fp32) and holds kv_b_proj's absorbed per-head matrices
        # in f32, so their inputs are never rounded.
        f32_in_engine = ("mlp.gate.weight", "self_attn.kv_b_proj.weight")
        self.round_for = ({k for k, d in self.dtypes.items() if d == "BF16" and not k.endswith(f32_in_engine)}
                          if bf16_activations else set())
        self.H = c["hidden_size"]
        self.nh = c["num_attention_heads"]
        self.nope, self.rope, self.vd = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
        self.kv_lora = c["kv_lora_rank"]
        self.q_lora = c.get("q_lora_rank")
        self.layers = c["num_hidden_layers"]
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.inv_freq, self.rope_mult, self.softmax_scale, self.yarn_range = yarn_params(c)
        if c.get("n_routed_experts") and c.get("topk_method", "noaux_tc") != "noaux_tc":
            raise ValueError(f"topk_method {c.get('topk_method')!r}: only noaux_tc is modelled")
        self.last_routing = {}  # layer -> (selected [T,k], weights [T,k], scores [T,E], biased [T,E])

    # ---- weights -------------------------------------------------------
    def _load(self, model_dir):
        """name -> weight, kept in float32 (every stored value, bf16, f32 or
        dequantised FP8, is an exact f32) and widened to float64 where used,
        so the --wide checkpoint fits in memory. FP8 weights are dequantised
        per spec §0.4: f32(float(e4m3) * scale_inv[row // 128, col // 128])."""
        raw, dtypes = load_dir(model_dir, raw_fp8=True), load_dir_dtypes(model_dir)
        q = self.cfg.get("quantization_config")
        if q is not None and q.get("quant_method") != "fp8":
            raise ValueError(f"quantization method {q.get('quant_method')!r} is not modelled")
        block = (q or {}).get("weight_block_size", [128, 128])
        if block[0] != block[1]:
            raise ValueError("only square weight blocks are modelled")
        w = {}
        for name, arr in raw.items():
            if name.endswith("_scale_inv"):
                continue
            if dtypes[name] == "F8_E4M3":
                sname = name + "_scale_inv"
                if sname not in raw:
                    raise ValueError(f"{name}: FP8 weight without {sname}")
                want = (-(-arr.shape[0] // block[0]), -(-arr.shape[1] // block[1]))
                if tuple(raw[sname].shape) != want:
                    raise ValueError(f"{sname}: shape {raw[sname].shape}, expected {want}")
                w[name] = fp8_block_dequantize(arr, raw[sname], block[0])
            elif dtypes[name] == "F8_E8M0":
                raise ValueError(f"{name}: E8M0 tensors are not part of DeepSeek V3")
            else:
                w[name] = arr
            raw[name] = None  # drop the codes early
        return w, dtypes

    def _rms(self, x, weight):  # spec §0.2
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * weight

    def _mm(self, x, name):
        """x @ W[name].T in float64 (W stored [out, in], spec §0.1); large
        matrices are widened in row blocks."""
        if name in self.round_for:
            x = _bf16(x)
        w = self.w[name]
        step = max(1, (1 << 24) // w.shape[1])
        if w.shape[0] <= step:
            return x @ w.astype(np.float64).T
        return np.concatenate([x @ w[r : r + step].astype(np.float64).T for r in range(0, w.shape[0], step)],
                              axis=-1)

    # ---- MLA (spec §3.1.2) ----------------------------------------------
    def mla_inputs(self, x, p, pos):
        """Per token: q_nope [T,H,nope], q_pe [T,H,rope] (RoPE'd), and the
        latent cache entry c_kv [T,kv_lora] (after kv_a_layernorm), k_pe
        [T,rope] (RoPE'd, shared by all heads)."""
        a = p + "self_attn."
        T = x.shape[0]
        if self.q_lora:
            c_q = self._rms(self._mm(x, a + "q_a_proj.weight"), self.w[a + "q_a_layernorm.weight"])
            q = self._mm(c_q, a + "q_b_proj.weight")
        else:
            q = self._mm(x, a + "q_proj.weight")
        q = q.reshape(T, self.nh, self.nope + self.rope)  # per head: nope then rope
        q_nope = q[..., : self.nope]
        q_pe = rope_interleaved(q[..., self.nope :], pos, self.inv_freq, self.rope_mult)
        kva = self._mm(x, a + "kv_a_proj_with_mqa.weight")  # [T, kv_lora + rope]
        c_kv = self._rms(kva[:, : self.kv_lora], self.w[a + "kv_a_layernorm.weight"])
        k_pe = rope_interleaved(kva[:, self.kv_lora :], pos, self.inv_freq, self.rope_mult)
        if self.bf16_kv:
            c_kv, k_pe = _bf16(c_kv), _bf16(k_pe)
        return q_nope, q_pe, c_kv, k_pe

    def _softmax_causal(self, scores, pos):
        """scores [H, T, S]; keys j > t masked out; softmax over j."""
        mask = pos[None, :] > pos[:, None]
        scores = np.where(mask[None], -np.inf, scores)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        return scores / scores.sum(-1, keepdims=True)

    def attention_mha(self, q_nope, q_pe, c_kv, k_pe, p, pos):
        """Non-absorbed (prefill) form: decompress the latent through
        kv_b_proj into per-head k_nope and v, attend per head (192-d keys)."""
        T = c_kv.shape[0]
        kv = self._mm(c_kv, p + "self_attn.kv_b_proj.weight").reshape(T, self.nh, self.nope + self.vd)
        k_nope, v = kv[..., : self.nope], kv[..., self.nope :]  # per head: k_nope rows then v rows
        s = np.einsum("thd,shd->hts", q_nope, k_nope) + np.einsum("thd,sd->hts", q_pe, k_pe)
        prob = self._softmax_causal(self.softmax_scale * s, pos)
        o = np.einsum("hts,shd->thd", prob, v).reshape(T, self.nh * self.vd)
        return self._mm(o, p + "self_attn.o_proj.weight")

    def attention_absorbed(self, q_nope, q_pe, c_kv, k_pe, p, pos):
        """Absorbed (decode, MQA) form: q~_h = Wuk_h^T q_nope_h, attend in the
        latent space over (c_kv, k_pe), then o_h = Wuv_h (sum_j p_j c_kv_j)."""
        T = c_kv.shape[0]
        name = p + "self_attn.kv_b_proj.weight"
        wkv_b = self.w[name].astype(np.float64).reshape(self.nh, self.nope + self.vd, self.kv_lora)
        w_uk, w_uv = wkv_b[:, : self.nope, :], wkv_b[:, self.nope :, :]
        bf16_in = _bf16 if name in self.round_for else (lambda t: t)  # inputs of products with kv_b_proj
        q_lat = np.einsum("thn,hnc->thc", bf16_in(q_nope), w_uk)  # [T, H, kv_lora]
        s = np.einsum("thc,sc->hts", q_lat, c_kv) + np.einsum("thd,sd->hts", q_pe, k_pe)
        prob = self._softmax_causal(self.softmax_scale * s, pos)
        o_lat = bf16_in(np.einsum("hts,sc->thc", prob, c_kv))  # [T, H, kv_lora]
        o = np.einsum("thc,hvc->thv", o_lat, w_uv).reshape(T, self.nh * self.vd)
        return self._mm(o, p + "self_attn.o_proj.weight")

    # ---- FFN / MoE (spec §0.6, §3.1.4) -----------------------------------
    def _swiglu(self, x, p):
        g = self._mm(x, p + "gate_proj.weight")
        u = self._mm(x, p + "up_proj.weight")
        return self._mm(g / (1.0 + np.exp(-g)) * u, p + "down_proj.weight")

    def is_moe(self, i):
        c = self.cfg
        return bool(c.get("n_routed_experts")) and i >= c.get("first_k_dense_replace", 0) \
            and i % c.get("moe_layer_freq", 1) == 0

    def route(self, x, p, bias_on=True):
        """noaux_tc routing. Returns (selected [T,k] expert ids, weights
        [T,k], scores [T,E], biased scores [T,E])."""
        c = self.cfg
        E, k = c["n_routed_experts"], c["num_experts_per_tok"]
        G, kg = c.get("n_group", 1), c.get("topk_group", 1)
        z = self._mm(x, p + "mlp.gate.weight")  # [T, E]
        if c.get("scoring_func", "sigmoid") == "sigmoid":
            scores = 1.0 / (1.0 + np.exp(-z))
        elif c["scoring_func"] == "softmax":
            e = np.exp(z - z.max(-1, keepdims=True))
            scores = e / e.sum(-1, keepdims=True)
        else:
            raise ValueError(f"scoring_func {c['scoring_func']!r}")
        bias = self.w.get(p + "mlp.gate.e_score_correction_bias")
        bias = None if bias is None else bias.astype(np.float64)
        biased = scores + bias if (bias is not None and bias_on) else scores.copy()
        T = x.shape[0]
        grouped = biased.reshape(T, G, E // G)
        group_score = np.sort(grouped, axis=-1)[..., -2:].sum(-1)  # sum of the 2 largest per group
        keep_groups = np.argsort(-group_score, axis=-1, kind="stable")[:, :kg]
        gmask = np.zeros((T, G), dtype=bool)
        np.put_along_axis(gmask, keep_groups, True, axis=-1)
        masked = np.where(np.repeat(gmask, E // G, axis=-1), biased, -np.inf)
        selected = np.argsort(-masked, axis=-1, kind="stable")[:, :k]
        weights = np.take_along_axis(scores, selected, axis=-1)  # unbiased scores
        if c.get("norm_topk_prob", True):  # (DeepSeek's remote code skips this for k == 1; HF/vLLM do not)
            weights = weights / (weights.sum(-1, keepdims=True) + 1e-20)
        weights = weights * c.get("routed_scaling_factor", 1.0)
        return selected, weights, scores, biased

    def moe(self, x, p, layer):
        c = self.cfg
        selected, weights, scores, biased = self.route(x, p)
        self.last_routing[layer] = (selected, weights, scores, biased)
        y = np.zeros_like(x)
        for e in range(c["n_routed_experts"]):  # grouped by expert: its tokens as one product
            rows, slot = np.nonzero(selected == e)
            if rows.size:
                y[rows] += weights[rows, slot][:, None] * self._swiglu(x[rows], p + f"mlp.experts.{e}.")
        if c.get("n_shared_experts"):
            y += self._swiglu(x, p + "mlp.shared_experts.")
        return y

    # ---- block (spec §3.1.1) ---------------------------------------------
    def hidden(self, ids, absorbed=None):
        """Final hidden state after model.norm, [T, hidden]."""
        absorbed = self.absorbed if absorbed is None else absorbed
        topk = self.cfg.get("index_topk")
        if topk is not None and len(ids) > topk:
            # DeepseekV32: the lightning indexer (spec §3.1.3) is not modelled; it
            # selects every causal key (dense MLA) only while T <= index_topk.
            raise ValueError(f"{len(ids)} tokens > index_topk {topk}: the V3.2 indexer is not modelled")
        W = self.w
        ids = np.asarray(ids, dtype=np.int64)
        x = W["model.embed_tokens.weight"][ids].astype(np.float64)
        pos = np.arange(len(ids))
        attn = self.attention_absorbed if absorbed else self.attention_mha
        for i in range(self.layers):
            p = f"model.layers.{i}."
            h = self._rms(x, W[p + "input_layernorm.weight"])
            x = x + attn(*self.mla_inputs(h, p, pos), p, pos)
            h = self._rms(x, W[p + "post_attention_layernorm.weight"])
            x = x + (self.moe(h, p, i) if self.is_moe(i) else self._swiglu(h, p + "mlp."))
        return self._rms(x, W["model.norm.weight"])

    def forward(self, ids, absorbed=None):
        """Logits [len(ids), vocab] (float64) for every position."""
        return self._mm(self.hidden(ids, absorbed), "lm_head.weight")

    logits = forward  # the name tools/compare_logits.py calls

    def greedy(self, prompt_ids, n):
        ids = list(prompt_ids)
        for _ in range(n):
            ids.append(int(np.argmax(self.forward(ids)[-1])))
        return ids[len(prompt_ids):]


# ---- self-test (spec §6.3 invariants that apply to V3) --------------------
def _write(out, *args):
    subprocess.run([sys.executable, os.path.join(HERE, "make_deepseek_checkpoint.py"), "--out", out, *args],
                   check=True)


def self_test(model_dir=None):
    fresh = model_dir is None  # a fresh f32 checkpoint also gets its FP8 twin and variants checked
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        # RoPE layout: interleaved pairs; HF's de-interleave form gives the same dot products.
        f, mult, _, _ = yarn_params({"qk_rope_head_dim": 16, "qk_nope_head_dim": 32, "rope_theta": 10000.0,
                                     "rope_scaling": {"type": "yarn", "factor": 4.0,
                                                      "original_max_position_embeddings": 1024, "beta_fast": 32,
                                                      "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}})
        pos = np.arange(40)
        e2 = np.zeros((40, 16)); e2[:, 2] = 1.0
        r = rope_interleaved(e2, pos, f)
        check(np.allclose(r[:, 2], np.cos(pos * f[1])) and np.allclose(r[:, 3], np.sin(pos * f[1]))
              and np.all(r[:, [0, 1] + list(range(4, 16))] == 0), "RoPE pairs (2i, 2i+1) (interleaved)")
        a, b = rng.standard_normal((40, 3, 16)), rng.standard_normal((40, 16))
        d_int = np.einsum("thd,sd->hts", rope_interleaved(a, pos, f, mult), rope_interleaved(b, pos, f, mult))
        d_hf = np.einsum("thd,sd->hts", rope_hf_deinterleave(a, pos, f, mult), rope_hf_deinterleave(b, pos, f, mult))
        check(np.max(np.abs(d_int - d_hf)) < 1e-12, "interleaved RoPE == HF de-interleave + rotate_half (q.k)")
        shift = np.einsum("thd,sd->hts", rope_interleaved(a, pos + 7, f), rope_interleaved(b, pos + 7, f))
        check(np.max(np.abs(shift - np.einsum("thd,sd->hts", rope_interleaved(a, pos, f),
                                               rope_interleaved(b, pos, f)))) < 1e-10,
              "RoPE scores depend on t - j only")

        if model_dir is None:
            model_dir = os.path.join(tmp, "f32")
            _write(model_dir, "--dtype", "f32", "--seed", "3")
        m = DeepseekReference(model_dir)
        c = m.cfg
        if c.get("rope_scaling") and c["qk_rope_head_dim"] == 16 and c["rope_scaling"]["factor"] == 4.0 \
                and c["rope_scaling"]["original_max_position_embeddings"] == 1024:
            want = 48 ** -0.5 * (0.1 * math.log(4.0) + 1) ** 2
            check(m.yarn_range == (1, 5) and abs(m.softmax_scale - want) < 1e-15,
                  f"YaRN lo/hi {m.yarn_range} == (1, 5), softmax scale {m.softmax_scale:.6f} (spec §6.1)")
        T = 40
        ids = list(rng.integers(0, c["vocab_size"], T))
        mha = m.forward(ids, absorbed=False)
        routing = dict(m.last_routing)
        ab = m.forward(ids, absorbed=True)
        scale = np.max(np.abs(mha))
        check(np.max(np.abs(ab - mha)) / scale < 1e-10,
              f"absorbed == non-absorbed MLA (rel {np.max(np.abs(ab - mha)) / scale:.1e})")
        check(0.3 < np.std(mha) < 30, f"logits O(1) (std {np.std(mha):.2f})")
        # a bf16 latent cache rounds the same (c_kv, k_pe) in both forms
        mk = DeepseekReference(model_dir, bf16_kv=True)
        k1, k2 = mk.forward(ids, absorbed=False), mk.forward(ids, absorbed=True)
        check(np.max(np.abs(k1 - k2)) / scale < 1e-10 and 0 < np.max(np.abs(k1 - mha)) / scale < 1e-2,
              "bf16 latent cache: both forms agree, close to the f32 one")

        # MoE invariants on the real hidden states of each MoE layer.
        rsf, k = c["routed_scaling_factor"], c["num_experts_per_tok"]
        E, G, kg = c["n_routed_experts"], c["n_group"], c["topk_group"]
        moe_layers = [i for i in range(m.layers) if m.is_moe(i)]
        check(moe_layers == [i for i in range(c["first_k_dense_replace"], m.layers)
                             if i % c["moe_layer_freq"] == 0], f"MoE layers {moe_layers}")
        changed, used = 0, set()
        for i in moe_layers:
            sel, wts, scores, biased = routing[i]
            used |= set(sel.ravel().tolist())
            if c.get("norm_topk_prob", True):
                check(np.max(np.abs(wts.sum(-1) - rsf)) < 1e-12, f"layer {i}: routing weights sum to {rsf}")
            gs = np.sort(biased.reshape(T, G, E // G), -1)[..., -2:].sum(-1)
            top_groups = np.argsort(-gs, -1)[:, :kg]
            in_top = all(set((sel[t] // (E // G)).tolist()) <= set(top_groups[t].tolist()) for t in range(T))
            check(in_top, f"layer {i}: selected experts lie in the top-{kg} groups")
            check(all(len(set(s)) == k for s in sel.tolist()), f"layer {i}: {k} distinct experts per token")
            # the weights are the unbiased scores of the selected experts
            expect = np.take_along_axis(scores, sel, -1)
            if c.get("norm_topk_prob", True):
                expect = expect / expect.sum(-1, keepdims=True)
            check(np.max(np.abs(wts - expect * rsf)) < 1e-12, f"layer {i}: weights use unbiased scores")
        # the bias changes selection (rerun the layers' routing with the bias off)
        x_in = _moe_inputs(m, ids)
        for i in moe_layers:
            p = f"model.layers.{i}."
            s1, w1, _, _ = m.route(x_in[i], p, bias_on=True)
            s0, w0, sc0, _ = m.route(x_in[i], p, bias_on=False)
            diff = np.any(np.sort(s1, -1) != np.sort(s0, -1), axis=-1)
            changed += int(diff.sum())
            same = ~diff
            o1, o0 = np.argsort(s1[same], -1), np.argsort(s0[same], -1)
            check(np.array_equal(np.take_along_axis(w1[same], o1, -1), np.take_along_axis(w0[same], o0, -1)),
                  f"layer {i}: where the bias leaves the selection alone the weights are unchanged")
        check(changed > 0, f"the bias changes the selection ({changed} token-layers of {T * len(moe_layers)})")
        check(len(used) == E, f"routing is not degenerate ({len(used)} of {E} experts used)")

        # causality by perturbation: changing token s changes no logits at t < s
        for s in (0, 1, 17, T - 1):
            ids2 = list(ids)
            ids2[s] = (ids2[s] + 1) % c["vocab_size"]
            out2 = m.forward(ids2)
            before = np.max(np.abs(out2[:s] - mha[:s])) if s else 0.0
            after = np.max(np.abs(out2[s:] - mha[s:]))
            check(before <= 1e-12 * scale and after > 1e-6, f"causality: token {s} changes only t >= {s}")

        if fresh:
            # FP8 variant of the same weights: dequantisation bit-exact, close to f32.
            fp8_dir = os.path.join(tmp, "fp8")
            _write(fp8_dir, "--dtype", "f32", "--seed", "3", "--fp8")
            m8 = DeepseekReference(fp8_dir)
            raw = load_dir(fp8_dir, raw_fp8=True)
            n = "model.layers.1.self_attn.kv_a_proj_with_mqa.weight"
            codes, sc = raw[n], raw[n + "_scale_inv"]
            exp = np.empty(codes.shape, dtype=np.float32)
            for r0 in range(codes.shape[0]):
                for c0 in range(codes.shape[1]):
                    exp[r0, c0] = np.float32(e4m3_decode(codes[r0, c0])) * sc[r0 // 128, c0 // 128]
            check(np.array_equal(m8.w[n], exp.astype(np.float64)), "FP8 dequantisation f32(e4m3 * scale_inv)")
            rel = np.max(np.abs(m8.w[n] - m.w[n])) / np.max(np.abs(m.w[n]))
            check(rel <= 1 / 16 + 1e-9, f"FP8 weights within half an e4m3 ulp of the f32 ones (rel {rel:.1e})")
            d8 = m8.forward(ids)
            check(np.max(np.abs(m8.forward(ids, absorbed=True) - d8)) / np.max(np.abs(d8)) < 1e-10,
                  "FP8: absorbed == non-absorbed")
            check(np.corrcoef(d8.ravel(), mha.ravel())[0, 1] > 0.9, "FP8 logits track the f32 ones")
            # variants: no q LoRA, softmax scoring without renormalisation, deepseek_yarn, moe_layer_freq 2
            for tag, args in (("noqlora", ["--q-lora-rank", "0"]),
                              ("softmax", ["--scoring", "softmax", "--no-norm-topk-prob"]),
                              ("freq2", ["--rope-type", "deepseek_yarn", "--moe-layer-freq", "2", "--layers", "5",
                                         "--mscale", "0.707", "--mscale-all-dim", "0.707"])):
                d = os.path.join(tmp, tag)
                _write(d, "--dtype", "f32", "--seed", "5", *args)
                mv = DeepseekReference(d)
                o1, o2 = mv.forward(ids, absorbed=False), mv.forward(ids, absorbed=True)
                check(np.max(np.abs(o1 - o2)) / np.max(np.abs(o1)) < 1e-10, f"{tag}: absorbed == non-absorbed")
                if tag == "softmax":
                    sel, wts, scores, _ = mv.last_routing[1]
                    check(np.max(np.abs(wts - np.take_along_axis(scores, sel, -1) * 2.5)) < 1e-12,
                          "softmax, norm_topk_prob false: weights = score * routed_scaling_factor")
                if tag == "freq2":
                    check([i for i in range(5) if mv.is_moe(i)] == [2, 4], "moe_layer_freq 2: layers 2, 4 MoE")
    print("self-test " + ("passed" if not failures else f"FAILED ({len(failures)})"))
    return 0 if not failures else 1


def _moe_inputs(m, ids):
    """The post_attention_layernorm output entering each MoE layer."""
    W, out = m.w, {}
    x = W["model.embed_tokens.weight"][np.asarray(ids)].astype(np.float64)
    pos = np.arange(len(ids))
    for i in range(m.layers):
        p = f"model.layers.{i}."
        h = m._rms(x, W[p + "input_layernorm.weight"])
        x = x + m.attention_mha(*m.mla_inputs(h, p, pos), p, pos)
        h = m._rms(x, W[p + "post_attention_layernorm.weight"])
        out[i] = h
        x = x + (m.moe(h, p, i) if m.is_moe(i) else m._swiglu(h, p + "mlp."))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model")
    ap.add_argument("--ids", help="comma-separated token ids")
    ap.add_argument("--absorbed", action="store_true", help="attention in the absorbed (latent) form")
    ap.add_argument("--bf16-kv", action="store_true", help="round the latent cache entries to bf16")
    ap.add_argument("--bf16-activations", action="store_true")
    ap.add_argument("--greedy", type=int, default=0, help="also generate N greedy tokens (teacher forcing after)")
    ap.add_argument("--out", help="write logits: .npy (array [T, vocab]) or .json")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test(a.model)
    if not a.model or not a.ids:
        ap.error("--model and --ids are required (or --self-test)")
    m = DeepseekReference(a.model, bf16_activations=a.bf16_activations, bf16_kv=a.bf16_kv, absorbed=a.absorbed)
    ids = [int(t) for t in a.ids.split(",") if t.strip()]
    out_ids = m.greedy(ids, a.greedy) if a.greedy else []
    logits = m.forward(ids + out_ids)
    if a.greedy:
        # `pagoda logits` format: one row per generated token (the row that predicted it)
        doc = {"prompt_ids": ids, "output_ids": out_ids, "logits": logits[len(ids) - 1 : -1].tolist()}
    else:
        doc = {"prompt_ids": ids, "output_ids": [], "logits": logits.tolist()}  # every position
    doc.update(reference="deepseek_reference.py", absorbed=a.absorbed,
               kv_cache_dtype="bf16" if a.bf16_kv else "f32")
    if a.out and a.out.endswith(".npy"):
        np.save(a.out, logits)
    elif a.out:
        json.dump(doc, open(a.out, "w"))
    for t, row in enumerate(logits):
        print(f"{t}\ttoken {(ids + out_ids)[t]}\targmax {int(np.argmax(row))}\tmax|logit| {np.max(np.abs(row)):.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
