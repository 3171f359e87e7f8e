"""Independent numpy (float64) reference of the Hugging Face forward pass of
Llama / Mistral / Qwen2 / Qwen3 decoders, written from the transformers
semantics. It recomputes the whole sequence every call (no KV cache), a
different algorithm from the engine's paged, incremental one on purpose.
"""
import json
import math
import os

import numpy as np

from safetensors_np import bf16_bits_to_f32, f32_to_bf16_bits, load_dir, load_dir_dtypes


def _bf16(x):
    """x rounded to f32, then to bf16 (nearest even), back as float64."""
    return bf16_bits_to_f32(f32_to_bf16_bits(x.astype(np.float32))).astype(np.float64)


class ReferenceModel:
    def __init__(self, model_dir, bf16_activations=False, bf16_kv=False):
        """bf16_activations: model the engine's bf16 dot-product kernels
        (vdpbf16ps): activations are rounded to bf16 (nearest even, from
        f32) before every product with a BF16-stored weight matrix.
        bf16_kv: model a bf16 KV cache (--kv-cache-dtype bf16): keys (after
        qk-norm and RoPE) and values are rounded to bf16 (nearest even,
        from f32) before attention reads them; queries stay unrounded."""
        self.bf16_kv = bf16_kv
        self.cfg = json.load(open(os.path.join(model_dir, "config.json")))
        self.w = {k: v.astype(np.float64) for k, v in load_dir(model_dir).items()}
        dtypes = load_dir_dtypes(model_dir)
        self.round_for = {k for k, d in dtypes.items() if d == "BF16"} if bf16_activations else set()
        c = self.cfg
        self.hidden = c["hidden_size"]
        self.heads = c["num_attention_heads"]
        self.kv_heads = c.get("num_key_value_heads") or self.heads
        self.head_dim = c.get("head_dim") or self.hidden // self.heads
        self.layers = c["num_hidden_layers"]
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.qk_norm = c["architectures"][0] == "Qwen3ForCausalLM"
        self.bias = c.get("attention_bias", False) or c.get("model_type") == "qwen2"
        self.inv_freq = self._inv_freq()
        self.windows = self._windows()

    def _inv_freq(self):
        c, d = self.cfg, self.head_dim
        theta = c.get("rope_theta", 10000.0)
        inv = 1.0 / (theta ** (np.arange(0, d, 2, dtype=np.float64) / d))
        rs = c.get("rope_scaling") or {}
        kind = rs.get("rope_type", rs.get("type", "default"))
        if kind == "linear":
            inv = inv / rs["factor"]
        elif kind == "llama3":
            factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
            old = rs["original_max_position_embeddings"]
            lo_wl, hi_wl = old / lo, old / hi
            wl = 2 * math.pi / inv
            scaled = np.where(wl > lo_wl, inv / factor, inv)
            smooth = (old / wl - lo) / (hi - lo)
            mid = (1 - smooth) * inv / factor + smooth * inv
            is_mid = (wl >= hi_wl) & (wl <= lo_wl)
            inv = np.where(is_mid, mid, scaled)
        return inv

    def _windows(self):
        c = self.cfg
        w = [0] * self.layers
        if c.get("layer_types"):
            return [c["sliding_window"] if t == "sliding_attention" else 0 for t in c["layer_types"]]
        if c.get("sliding_window"):
            if c.get("model_type") == "qwen2":
                if c.get("use_sliding_window"):
                    mwl = c.get("max_window_layers", self.layers)
                    w = [c["sliding_window"] if i >= mwl else 0 for i in range(self.layers)]
            else:
                w = [c["sliding_window"]] * self.layers
        return w

    def _rms(self, x, weight):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * weight

    def _rope(self, x, positions):  # x: [T, H, D], rotate_half convention
        ang = positions[:, None].astype(np.float64) * self.inv_freq[None, :]
        cos = np.concatenate([np.cos(ang)] * 2, axis=-1)[:, None, :]
        sin = np.concatenate([np.sin(ang)] * 2, axis=-1)[:, None, :]
        half = x.shape[-1] // 2
        rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
        return x * cos + rot * sin

    def _mm(self, x, name):
        """x @ W[name].T, x rounded as the engine's kernel for W sees it."""
        if name in self.round_for:
            x = _bf16(x)
        return x @ self.w[name].T

    def logits(self, ids):
        """Logits [len(ids), vocab] for every position of the sequence."""
        W, T = self.w, len(ids)
        x = W["model.embed_tokens.weight"][np.array(ids)]
        pos = np.arange(T)
        for i in range(self.layers):
            p = f"model.layers.{i}."
            h = self._rms(x, W[p + "input_layernorm.weight"])

            def proj(name):
                y = self._mm(h, p + f"self_attn.{name}_proj.weight")
                return y + W[p + f"self_attn.{name}_proj.bias"] if self.bias else y

            q = proj("q").reshape(T, self.heads, self.head_dim)
            k = proj("k").reshape(T, self.kv_heads, self.head_dim)
            v = proj("v").reshape(T, self.kv_heads, self.head_dim)
            if self.qk_norm:
                q = self._rms(q, W[p + "self_attn.q_norm.weight"])
                k = self._rms(k, W[p + "self_attn.k_norm.weight"])
            q, k = self._rope(q, pos), self._rope(k, pos)
            if self.bf16_kv:
                k, v = _bf16(k), _bf16(v)
            rep = self.heads // self.kv_heads
            k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
            scores = np.einsum("thd,shd->hts", q, k) / math.sqrt(self.head_dim)
            mask = pos[None, :] > pos[:, None]
            if self.windows[i]:
                mask |= (pos[:, None] - pos[None, :]) >= self.windows[i]
            scores = np.where(mask[None], -np.inf, scores)
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            attn = np.einsum("hts,shd->thd", scores, v).reshape(T, -1)
            x = x + self._mm(attn, p + "self_attn.o_proj.weight")
            h = self._rms(x, W[p + "post_attention_layernorm.weight"])
            gate = self._mm(h, p + "mlp.gate_proj.weight")
            up = self._mm(h, p + "mlp.up_proj.weight")
            x = x + self._mm(gate / (1 + np.exp(-gate)) * up, p + "mlp.down_proj.weight")
        x = self._rms(x, W["model.norm.weight"])
        return self._mm(x, "lm_head.weight" if "lm_head.weight" in W else "model.embed_tokens.weight")

    def greedy(self, prompt_ids, n):
        ids = list(prompt_ids)
        for _ in range(n):
            ids.append(int(np.argmax(self.logits(ids)[-1])))
        return ids[len(prompt_ids):]
