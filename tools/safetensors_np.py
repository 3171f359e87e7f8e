"""Minimal safetensors reader/writer on numpy (no torch, no safetensors package).

bf16 is handled as the upper 16 bits of float32 (round-to-nearest-even when
writing). Used by the tiny-checkpoint generator and the numpy reference.

FP8: "F8_E4M3" (float8_e4m3fn) and "F8_E8M0" (unsigned power-of-two scale)
are encoded/decoded here from their format definitions (no ml_dtypes):
  e4m3fn: 1 sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinity;
          S.1111.111 is NaN; largest finite 448 = 1.75 * 2^8; subnormals
          (exponent field 0) are m/8 * 2^-6; smallest positive 2^-9.
  e8m0:   8 exponent bits, no sign, no mantissa: 2^(e - 127); 0xFF is NaN.
In memory FP8 tensors are uint8 arrays of the codes; `load_file` decodes
them to float32 unless `raw_fp8=True`. `python3 safetensors_np.py` runs the
codec self-check.
"""
import json
import os
import struct

import numpy as np

_NP = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64, "U8": np.uint8, "I8": np.int8,
       "F64": np.float64}
FP8_DTYPES = ("F8_E4M3", "F8_E8M0")
E4M3_MAX = 448.0


def _e4m3_table():
    """float64 value of each of the 256 e4m3fn codes (NaN for 0x7F/0xFF)."""
    codes = np.arange(256)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    e = (codes >> 3) & 0xF
    m = codes & 0x7
    normal = (1.0 + m / 8.0) * np.exp2(e.astype(np.float64) - 7.0)
    subnormal = (m / 8.0) * 2.0 ** -6
    v = sign * np.where(e == 0, subnormal, normal)
    v[(e == 15) & (m == 7)] = np.nan
    return v


E4M3_VALUES = _e4m3_table()
# Codes 0x00..0x7E are the non-negative finite values in increasing order.
_E4M3_POS = E4M3_VALUES[:0x7F]


def e4m3_decode(codes):
    """uint8 codes -> float32 values (exact: every e4m3 value is an f32)."""
    return E4M3_VALUES[np.asarray(codes, dtype=np.uint8)].astype(np.float32)


def e4m3_encode_nearest(x):
    """Reference encoder straight from the definition: the nearest of the
    127 finite magnitudes (table search), ties to the even code (mantissa
    LSB 0), magnitudes beyond 448 (incl. inf) saturate to 448, NaN -> 0x7F.
    Exact for f32/f64 inputs (neighbours and midpoints are f64 values)."""
    x = np.asarray(x, dtype=np.float64)
    a = np.minimum(np.abs(x), E4M3_MAX)  # saturate (inf too); NaN stays NaN
    nan = np.isnan(a)
    a = np.where(nan, 0.0, a)
    hi = np.searchsorted(_E4M3_POS, a, side="left")  # _E4M3_POS[hi-1] < a <= _E4M3_POS[hi]
    hi = np.minimum(hi, 0x7E)
    lo = np.maximum(hi - 1, 0)
    d_lo, d_hi = a - _E4M3_POS[lo], _E4M3_POS[hi] - a
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    code = np.where(pick_hi, hi, lo).astype(np.uint8)
    code = np.where(np.signbit(x), code | 0x80, code).astype(np.uint8)
    return np.where(nan, np.uint8(0x7F), code).astype(np.uint8)


def e4m3_encode(x):
    """float array -> uint8 e4m3fn codes, same rounding as
    e4m3_encode_nearest (RNE, saturation to +-448, NaN -> 0x7F) but
    arithmetic: with E = max(floor(log2|x|), -6) the spacing is 2^(E-3), so
    n = rint(|x| / 2^(E-3)) (np.rint rounds half to even; the scaling by a
    power of two is exact) and code = 8*(E+7) + n - 8, where n == 16
    carries into the next exponent by itself and E = -6 covers subnormals.
    The self-check compares it with the table search."""
    x = np.asarray(x, dtype=np.float64)
    a = np.minimum(np.abs(x), E4M3_MAX)
    nan = np.isnan(a)
    a = np.where(nan, 0.0, a)
    _, k = np.frexp(a)  # a = m * 2^k, m in [0.5, 1): floor(log2 a) = k - 1
    e = np.maximum(k - 1, -6)
    n = np.rint(np.ldexp(a, 3 - e))
    code = np.where(a == 0, 0, 8 * e + 48 + n).astype(np.uint8)
    code = np.where(np.signbit(x), code | 0x80, code).astype(np.uint8)
    return np.where(nan, np.uint8(0x7F), code).astype(np.uint8)


def e8m0_decode(codes):
    """uint8 exponent codes -> float32 2^(e-127); 0xFF -> NaN. (2^-127 is an
    f32 subnormal, still exact.)"""
    c = np.asarray(codes, dtype=np.uint8)
    v = np.exp2(c.astype(np.float64) - 127.0)
    return np.where(c == 0xFF, np.nan, v).astype(np.float32)


def e8m0_encode(x, rounding="exact"):
    """positive float array -> uint8 exponent codes. rounding: "exact"
    (every value must be a power of two in [2^-127, 2^127]) or "ceil" (the
    smallest power of two >= x, as DeepSeek's ue8m0 scales are made)."""
    x = np.asarray(x, dtype=np.float64)
    if np.any(~(x > 0)) or np.any(~np.isfinite(x)):
        raise ValueError("e8m0 encodes positive finite values only")
    m, e = np.frexp(x)  # x = m * 2^e, m in [0.5, 1)
    pow2 = m == 0.5
    if rounding == "exact":
        if not np.all(pow2):
            raise ValueError("e8m0 'exact' needs powers of two")
        k = e - 1
    elif rounding == "ceil":
        k = np.where(pow2, e - 1, e)
    else:
        raise ValueError(rounding)
    if np.any(k < -127) or np.any(k > 127):
        raise ValueError("e8m0 exponent out of range")
    return (k + 127).astype(np.uint8)


def fp8_self_check():
    """decode(encode(v)) == v for every code, RNE at every midpoint,
    saturation, NaN handling; e8m0 round trip. Raises AssertionError."""
    codes = np.arange(256, dtype=np.uint8)
    v = e4m3_decode(codes)
    finite = ~np.isnan(v)
    assert np.sum(~finite) == 2 and np.isnan(v[0x7F]) and np.isnan(v[0xFF])
    assert v[0x7E] == 448.0 and v[0x01] == 2.0 ** -9 and v[0x08] == 2.0 ** -6 and v[0x38] == 1.0
    re = e4m3_encode(v[finite])
    assert np.array_equal(re, codes[finite]), "e4m3 round trip"  # incl. -0.0 -> 0x80
    assert np.array_equal(e4m3_decode(re), v[finite])
    assert e4m3_encode(np.float32(np.nan)) == 0x7F
    pos = E4M3_VALUES[:0x7F]
    mid = (pos[:-1] + pos[1:]) / 2
    want = np.where(np.arange(1, 0x7F) % 2 == 0, np.arange(1, 0x7F), np.arange(0, 0x7E))
    assert np.array_equal(e4m3_encode(mid), want.astype(np.uint8)), "e4m3 ties to even"
    assert np.array_equal(e4m3_encode(-mid), (want | 0x80).astype(np.uint8)), "e4m3 negative ties"
    up, down = np.nextafter(mid, np.inf), np.nextafter(mid, -np.inf)
    assert np.array_equal(e4m3_encode(up), np.arange(1, 0x7F).astype(np.uint8))
    assert np.array_equal(e4m3_encode(down), np.arange(0, 0x7E).astype(np.uint8))
    sat = e4m3_encode(np.array([448.0, 449.0, 464.0, 480.0, 1e6, np.inf, -500.0, -np.inf]))
    assert list(sat) == [0x7E] * 6 + [0xFE] * 2, "e4m3 saturation"
    assert e4m3_encode(2.0 ** -10) == 0 and e4m3_encode(2.0 ** -10 * 1.0000001) == 1
    # The arithmetic encoder equals the table search on everything above and
    # on random values over the whole range (incl. subnormals, saturation).
    rng = np.random.default_rng(1)
    probe = np.concatenate([v[finite], mid, -mid, up, down, np.array([0.0, -0.0, 1e-30, 500.0, np.inf, -np.inf]),
                            rng.standard_normal(200000) * np.exp2(rng.uniform(-12, 10, 200000))])
    assert np.array_equal(e4m3_encode(probe), e4m3_encode_nearest(probe)), "e4m3 encoders disagree"
    probe32 = probe.astype(np.float32)
    assert np.array_equal(e4m3_encode(probe32), e4m3_encode_nearest(probe32))
    e = e8m0_decode(codes)
    assert np.isnan(e[255]) and e[127] == 1.0 and e[0] == np.float32(2.0 ** -127) and e[254] == 2.0 ** 127
    assert np.array_equal(e8m0_encode(e[:255].astype(np.float64)), codes[:255]), "e8m0 round trip"
    assert list(e8m0_encode(np.array([3.0, 4.0, 0.3]), "ceil")) == [129, 129, 126]
    return True


def fp8_block_quantize(w, block=128):
    """[out, in] float weight -> (uint8 e4m3 codes [out, in], float32
    scale_inv [ceil(out/block), ceil(in/block)]) with, per block,
    scale_inv = f32(max(amax, 1e-4) / 448) and code = e4m3(w / scale_inv),
    so that dequantised = float(e4m3) * scale_inv (partial edge blocks)."""
    w = np.asarray(w, dtype=np.float64)
    out_dim, in_dim = w.shape
    nb_o, nb_i = -(-out_dim // block), -(-in_dim // block)
    padded = np.zeros((nb_o * block, nb_i * block))
    padded[:out_dim, :in_dim] = np.abs(w)  # zero padding never raises an amax
    amax = padded.reshape(nb_o, block, nb_i, block).max(axis=(1, 3))
    scale = (np.maximum(amax, 1e-4) / E4M3_MAX).astype(np.float32)
    s_full = np.repeat(np.repeat(scale.astype(np.float64), block, 0), block, 1)[:out_dim, :in_dim]
    return e4m3_encode(w / s_full), scale


def fp8_block_dequantize(codes, scale_inv, block=128):
    """e4m3 codes [out, in] x f32 block scales -> float32, each element
    f32(float(e4m3) * scale_inv) (one f32 product, so bit-exact with a
    kernel computing the same product in f32)."""
    v = e4m3_decode(codes)
    s = np.repeat(np.repeat(np.asarray(scale_inv, dtype=np.float32), block, 0), block, 1)
    return (v * s[: v.shape[0], : v.shape[1]]).astype(np.float32)


def f32_to_bf16_bits(a):
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def bf16_bits_to_f32(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def encode(arr, dtype):
    """Raw little-endian bytes of `arr` stored as `dtype`. F8_* accept uint8
    codes (written as they are) or floats (encoded: e4m3 RNE+saturation,
    e8m0 exact powers of two)."""
    arr = np.asarray(arr)
    if dtype == "BF16":
        return f32_to_bf16_bits(arr).tobytes()
    if dtype in FP8_DTYPES:
        if arr.dtype == np.uint8:
            return arr.tobytes()
        return (e4m3_encode(arr) if dtype == "F8_E4M3" else e8m0_encode(arr)).tobytes()
    return np.ascontiguousarray(arr, dtype=_NP[dtype]).tobytes()


def _header_bytes(entries):
    h = json.dumps(entries).encode()
    return h + b" " * ((8 - len(h) % 8) % 8)


def save(path, tensors, dtype="F32"):
    """tensors: name -> array; dtype: one dtype string for all (F32 | BF16 |
    F16 | ...), or a dict name -> dtype (missing names: F32)."""
    header, blobs, offset = {}, [], 0
    for name, arr in tensors.items():
        arr = np.asarray(arr)
        dt = dtype.get(name, "F32") if isinstance(dtype, dict) else dtype
        raw = encode(arr, dt)
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    with open(path, "wb") as f:
        h = _header_bytes(header)
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


_ITEMSIZE = {"F32": 4, "F16": 2, "BF16": 2, "I32": 4, "I64": 8, "U8": 1, "I8": 1, "F64": 8,
             "F8_E4M3": 1, "F8_E8M0": 1}


class StreamWriter:
    """Writes a safetensors file whose tensor list (name, dtype, shape) is
    known up front, tensor by tensor and in pieces, so a multi-GB file never
    sits in memory. Usage:
        with StreamWriter(path, [(name, dtype, shape), ...]) as w:
            w.write(name, rows_chunk)   # in order; row chunks of each tensor
    Chunks are encoded with `encode`, in file order."""

    def __init__(self, path, specs, metadata=None):
        header, offset = {}, 0
        if metadata:
            header["__metadata__"] = metadata
        self.sizes = {}
        for name, dt, shape in specs:
            n = _ITEMSIZE[dt] * int(np.prod(shape, dtype=np.int64))
            header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [offset, offset + n]}
            self.sizes[name] = n
            offset += n
        self.order = [n for n, _, _ in specs]
        self.dtypes = {n: d for n, d, _ in specs}
        self.pos, self.done = 0, 0
        self.f = open(path, "wb")
        h = _header_bytes(header)
        self.f.write(struct.pack("<Q", len(h)))
        self.f.write(h)

    def write(self, name, chunk):
        if self.pos >= len(self.order) or self.order[self.pos] != name:
            raise ValueError(f"{name}: tensors must be written in header order")
        raw = encode(chunk, self.dtypes[name])
        self.f.write(raw)
        self.done += len(raw)
        if self.done > self.sizes[name]:
            raise ValueError(f"{name}: more bytes than its shape holds")
        if self.done == self.sizes[name]:
            self.pos, self.done = self.pos + 1, 0

    def close(self):
        self.f.close()
        if self.pos != len(self.order):
            raise ValueError(f"incomplete file: {self.order[self.pos]} not (fully) written")

    def __enter__(self):
        return self

    def __exit__(self, kind, *_):
        if kind is None:
            self.close()
        else:
            self.f.close()


def load_file(path, raw_fp8=False):
    """Returns name -> float32 (or integer) numpy array. F8_E4M3 / F8_E8M0
    tensors are decoded to float32, or with raw_fp8 kept as uint8 codes.
    The file is memory-mapped, so only the decoded copies take memory."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r")
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        raw = data[base + b : base + end]
        if e["dtype"] == "BF16":
            arr = bf16_bits_to_f32(raw.view(np.uint16) if (base + b) % 2 == 0 else raw.copy().view(np.uint16))
        elif e["dtype"] in FP8_DTYPES:
            arr = np.array(raw)
            if not raw_fp8:
                arr = e4m3_decode(arr) if e["dtype"] == "F8_E4M3" else e8m0_decode(arr)
        else:
            arr = np.frombuffer(raw.tobytes(), dtype=_NP[e["dtype"]]).astype(np.float32)
        out[name] = np.asarray(arr).reshape(e["shape"])
    del data
    return out


def _files(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        return sorted(set(json.load(open(index))["weight_map"].values()))
    return ["model.safetensors"]


def load_dir(model_dir, raw_fp8=False):
    """All tensors of a model directory (single file or sharded with an index)."""
    out = {}
    for f in _files(model_dir):
        out.update(load_file(os.path.join(model_dir, f), raw_fp8=raw_fp8))
    return out


def load_dir_dtypes(model_dir):
    """name -> stored dtype string ("BF16", "F32", ...) of every tensor."""
    out = {}
    for f in _files(model_dir):
        with open(os.path.join(model_dir, f), "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        out.update({k: e["dtype"] for k, e in header.items() if k != "__metadata__"})
    return out


def _self_test():
    import tempfile

    fp8_self_check()
    rng = np.random.default_rng(0)
    w = rng.standard_normal((300, 200)) * 0.05
    codes, scale = fp8_block_quantize(w)
    assert scale.shape == (3, 2) and codes.dtype == np.uint8
    deq = fp8_block_dequantize(codes, scale)
    assert np.max(np.abs(deq - w)) <= np.max(np.abs(w)) / 448 * 32 * 0.5 + 1e-12  # half a top-binade ulp
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "t.safetensors")
        t = {"w": codes, "w.weight_scale_inv": scale, "b": w[:3], "e": np.array([1.0, 0.5, 2.0 ** -20])}
        save(p, t, {"w": "F8_E4M3", "w.weight_scale_inv": "F32", "b": "BF16", "e": "F8_E8M0"})
        raw = load_file(p, raw_fp8=True)
        assert np.array_equal(raw["w"], codes) and list(raw["e"]) == [127, 126, 107]
        dec = load_file(p)
        assert np.array_equal(dec["w"], e4m3_decode(codes)) and np.array_equal(dec["w.weight_scale_inv"], scale)
        specs = [(n, dt, np.shape(t[n])) for n, dt in (("w", "F8_E4M3"), ("w.weight_scale_inv", "F32"))]
        p2 = os.path.join(d, "s.safetensors")
        with StreamWriter(p2, specs) as sw:
            sw.write("w", codes[:128])
            sw.write("w", codes[128:])
            sw.write("w.weight_scale_inv", scale)
        assert open(p, "rb").read()[8:] != b"" and np.array_equal(load_file(p2, raw_fp8=True)["w"], codes)
    print("safetensors_np self-check passed (e4m3: 256 codes round trip, RNE midpoints, saturation; e8m0)")


if __name__ == "__main__":
    _self_test()
