"""vLLM's engine arguments (LLM(...) and AsyncLLM(...) keywords) mapped onto
the C++ EngineOptions. Names and defaults follow vLLM; the string values
(quantization, kv_cache_dtype) are parsed by the same C++ functions as the
`pagoda` CLI flags, so both accept and refuse the same names."""

import os
import warnings

from . import _pagoda

# vLLM keywords that only steer GPU machinery or remote code: accepted so
# vLLM scripts run unchanged, with no effect on a CPU engine.
_IGNORED = ("enforce_eager", "trust_remote_code", "disable_log_stats", "swap_space")


def engine_options(model, tokenizer=None, dtype="auto", quantization=None,
                   kv_cache_memory=None, kv_cache_memory_bytes=None,
                   gpu_memory_utilization=None, max_model_len=None, max_num_seqs=None,
                   max_num_batched_tokens=None, block_size=None, enable_prefix_caching=True,
                   seed=None, threads=None, tensor_parallel_size=1, kv_cache_dtype="auto",
                   scheduling_policy="fcfs", **ignored):
    """Checks the keywords and returns (EngineOptions, seed)."""
    unknown = sorted(k for k in ignored if k not in _IGNORED)
    if unknown:
        raise TypeError(f"unexpected engine argument(s): {', '.join(unknown)}")
    model = os.fspath(model)
    if not os.path.isdir(model):
        raise FileNotFoundError(
            2, "model directory not found (pagoda loads a local Hugging Face checkpoint "
               "directory: config.json, *.safetensors, tokenizer.json)", model)
    if tokenizer is not None and os.path.realpath(os.fspath(tokenizer)) != os.path.realpath(model):
        raise ValueError("tokenizer: pagoda reads the tokenizer from the model directory; "
                         "a separate tokenizer path is not supported")
    if dtype != "auto":
        raise ValueError(
            f"dtype={dtype!r}: pagoda computes with the checkpoint's weights as stored "
            "(bf16 matmuls, f32 activations); pass dtype='auto' (quantization='int8' "
            "gives smaller weights)")
    if tensor_parallel_size != 1:
        raise ValueError(
            f"tensor_parallel_size={tensor_parallel_size}: the Python package runs one process; "
            "for tensor parallelism run `mpirun -np N pagoda serve --tensor-parallel-size N`")
    if gpu_memory_utilization is not None:
        warnings.warn("gpu_memory_utilization is ignored: pagoda runs on CPU, where the KV "
                      "cache is sized by kv_cache_memory (bytes; default: enough for "
                      "max_num_seqs full sequences, at most half the available memory)",
                      stacklevel=3)
    if kv_cache_memory is not None and kv_cache_memory_bytes is not None:
        raise ValueError("give kv_cache_memory or kv_cache_memory_bytes, not both")
    if kv_cache_memory is None:
        kv_cache_memory = kv_cache_memory_bytes
    o = _pagoda.EngineOptions()
    _set_positive(o, "kv_cache_memory", kv_cache_memory)
    _set_positive(o, "max_model_len", max_model_len)
    _set_positive(o, "max_num_seqs", max_num_seqs)
    _set_positive(o, "max_num_batched_tokens", max_num_batched_tokens)
    _set_positive(o, "block_size", block_size)
    _set_positive(o, "num_threads", threads, name="threads")
    o.enable_prefix_caching = bool(enable_prefix_caching)
    o.set_quantization("none" if quantization is None else str(quantization))
    o.set_kv_cache_dtype(str(kv_cache_dtype))
    o.set_scheduling_policy(str(scheduling_policy))
    if seed is not None and (not isinstance(seed, int) or seed < 0):
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return o, seed


def _set_positive(options, field, value, name=None):
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name or field} must be a positive integer, got {value!r}")
    setattr(options, field, value)
