"""Reference values for int8 and NF4 weight quantization (lib/model/quantization.h).

Run from the repository root with Debian's python3-torch:
    /usr/bin/python3 tests/reference/make_quantization_reference.py
writes tests/data/quantization_reference.json.

Independent of the C++ code, this script
  * derives the NF4 code book as bitsandbytes' create_normal_map(offset=0.9677083) does (normal
    quantiles; torch.special.ndtri stands in for scipy.stats.norm.ppf) and checks it against the
    table bitsandbytes and the QLoRA paper publish;
  * builds bitsandbytes' create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8), the
    8-bit code of the double-quantized absmaxes, transcribed from bitsandbytes/functional.py;
  * quantizes a test weight the way bitsandbytes' quantize_4bit(quant_type="nf4",
    blocksize=64, compress_statistics=True) lays it out: row-major blocks of 64, absmax per block,
    nearest code value (argmin of the distance here, a decision tree there), two codes per byte
    with the first in the high nibble; absmaxes minus their mean quantized in blocks of 256 with
    the dynamic map;
  * and int8 with a per-row absmax scale (w ≈ q · absmax / 127, round to nearest).
The test weight is exact in fp32 (multiples of powers of two), so both sides start from the same
bits without storing it.
"""
import json
import os

import torch

OUT = os.path.join("tests", "data", "quantization_reference.json")

# bitsandbytes.functional: the NF4 values as published (QLoRA, appendix E; get_4bit_type("nf4")).
PUBLISHED_NF4 = [
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
    -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
    0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
    0.7229568362236023, 1.0,
]


def ppf(p):
    return torch.special.ndtri(p.double())


def create_normal_map(offset=0.9677083):
    v1 = ppf(torch.linspace(offset, 0.5, 9)[:-1]).tolist()
    v2 = [0] * (256 - 15)
    v3 = (-ppf(torch.linspace(offset, 0.5, 8)[:-1])).tolist()
    values = torch.Tensor(v1 + v2 + v3)
    values = values.sort().values
    values /= values.max()
    return values


def create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8):
    data = []
    non_sign_bits = total_bits - (1 if signed else 1)
    additional_items = 2 ** (non_sign_bits - max_exponent_bits) - 1
    for i in range(max_exponent_bits):
        fraction_items = int(2 ** (i + non_sign_bits - max_exponent_bits) + 1 if signed
                             else 2 ** (i + non_sign_bits - max_exponent_bits + 1) + 1)
        boundaries = torch.linspace(0.1, 1, fraction_items)
        means = (boundaries[:-1] + boundaries[1:]) / 2.0
        data += ((10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
        if signed:
            data += (-(10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
    assert additional_items == 0
    data.append(0)
    data.append(1.0)
    assert len(data) == 2 ** total_bits
    data.sort()
    return torch.tensor(data)


def test_weight(rows, cols):
    """Exact fp32 values with varied block scales: k/1024 · 2^-(block % 5), k in [-1000, 1000]."""
    i = torch.arange(rows * cols, dtype=torch.int64)
    k = (i * 7919 + 13) % 2001 - 1000
    return (k.double() / 1024 * torch.pow(2.0, -((i // 64) % 5).double())).float().view(rows, cols)


def nearest(x, code):
    """Index of the nearest code value for each element of x (1-D)."""
    return (x.unsqueeze(1) - code.unsqueeze(0)).abs().argmin(dim=1)


def blocks_of(flat, size):
    pad = (-flat.numel()) % size
    return torch.cat([flat, flat.new_zeros(pad)]).view(-1, size)


def quantize_nf4(w, code, dyn):
    block = blocks_of(w.flatten(), 64)
    absmax = block.abs().amax(dim=1)
    normalized = (block * (1.0 / absmax).unsqueeze(1)).flatten()
    idx = nearest(normalized, code)
    packed = (idx[0::2] * 16 + idx[1::2]).to(torch.uint8)
    offset = absmax.mean()
    centred = blocks_of(absmax - offset, 256)
    absmax2 = centred.abs().amax(dim=1)
    idx2 = nearest((centred / absmax2.unsqueeze(1)).flatten(), dyn)[: absmax.numel()].to(torch.uint8)
    absmax_deq = dyn[idx2.long()] * absmax2.repeat_interleave(256)[: absmax.numel()] + offset
    deq = (code[idx].view(-1, 64) * absmax_deq.unsqueeze(1)).flatten()[: w.numel()].view_as(w)
    return packed, idx2, absmax2, offset, absmax_deq, deq


def quantize_int8(w):
    absmax = w.abs().amax(dim=1)
    q = torch.round(w * (127.0 / absmax).unsqueeze(1)).clamp(-127, 127).to(torch.int8)
    scale = absmax / 127.0
    return q, scale, q.float() * scale.unsqueeze(1)


def floats(t):
    return [float(x) for x in t.flatten().tolist()]


def main():
    normal_map = create_normal_map()
    nf4 = torch.unique(normal_map)
    assert nf4.numel() == 16, nf4
    published = torch.tensor(PUBLISHED_NF4)
    assert (nf4 - published).abs().max().item() < 1e-6, (nf4 - published)
    dyn = create_dynamic_map()

    cases = []
    # 257 blocks of 64 (+ a partial one): two absmax blocks of 256, the second padded.
    for rows, cols in [(6, 2743), (3, 40)]:
        w = test_weight(rows, cols)
        packed, idx2, absmax2, offset, absmax_deq, deq = quantize_nf4(w, published, dyn)
        q8, scale8, deq8 = quantize_int8(w)
        cases.append({
            "rows": rows, "cols": cols,
            "nf4": {
                "codes_hex": bytes(packed.tolist()).hex(),
                "absmax_codes_hex": bytes(idx2.tolist()).hex(),
                "absmax_scale": floats(absmax2),
                "absmax_offset": float(offset),
                "absmax_dequantized": floats(absmax_deq),
                "dequantized_first": floats(deq.flatten()[:200]),
                "dequantized_last": floats(deq.flatten()[-50:]),
                "relative_rms_error": float(((deq - w).square().mean().sqrt() / w.square().mean().sqrt())),
            },
            "int8": {
                "codes_hex": bytes((q8.flatten().to(torch.int16) & 0xFF).tolist()).hex(),
                "scale": floats(scale8),
                "relative_rms_error": float(((deq8 - w).square().mean().sqrt() / w.square().mean().sqrt())),
            },
        })
    out = {
        "generator": "tests/reference/make_quantization_reference.py, torch " + torch.__version__,
        "nf4_code_book_derived": floats(nf4),
        "dynamic_map": floats(dyn),
        "cases": cases,
    }
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote", OUT, "; nf4 max |derived - published| =", (nf4 - published).abs().max().item())


if __name__ == "__main__":
    main()
