#!/usr/bin/env python3
"""Reference values for ft's LLaMA layers, from an independent pure-PyTorch implementation that
follows Hugging Face transformers' modeling_llama.py line by line (LlamaRMSNorm,
LlamaRotaryEmbedding + apply_rotary_pos_emb, repeat_kv + eager attention, LlamaMLP, the decoder
layer, the llama3 rope scaling of modeling_rope_utils).

Inputs and weights are deterministic functions of arange (no RNG), and are written out with the
outputs, so the C++ test feeds exactly these tensors. Run with Debian's python3-torch:
    /usr/bin/python3 tests/reference/make_layer_reference.py > tests/data/layer_reference.json
"""
import json
import math
import sys

import torch

torch.set_num_threads(1)
DT = torch.float32

# A small config that still exercises GQA (2 query heads per KV head) and head_dim > 2.
CFG = dict(hidden_size=16, intermediate_size=24, num_attention_heads=4, num_key_value_heads=2,
           head_dim=4, rms_norm_eps=1e-5, rope_theta=10000.0)
B, T = 2, 5


def fill(shape, a, b, scale):
    n = math.prod(shape)
    return (torch.cos(torch.arange(n, dtype=DT) * a + b) * scale).reshape(shape)


# --- HF transformers, models/llama/modeling_llama.py (eager path) ---------------------------
def rms_norm(x, weight, eps):
    input_dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps)
    return weight * h.to(input_dtype)


def default_inv_freq(dim, base):
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))


def llama3_inv_freq(dim, base, factor, low_freq_factor, high_freq_factor, old_context_len):
    inv_freq = default_inv_freq(dim, base)
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def rotary_cos_sin(inv_freq, position_ids, dtype):
    inv_freq_expanded = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
    position_ids_expanded = position_ids[:, None, :].float()
    freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    cos = cos.unsqueeze(1)
    sin = sin.unsqueeze(1)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def attention(x, w, cos, sin, mask):
    nh, nkv, hd = CFG["num_attention_heads"], CFG["num_key_value_heads"], CFG["head_dim"]
    b, t, _ = x.shape
    q = (x @ w["q_proj"].T).view(b, t, nh, hd).transpose(1, 2)
    k = (x @ w["k_proj"].T).view(b, t, nkv, hd).transpose(1, 2)
    v = (x @ w["v_proj"].T).view(b, t, nkv, hd).transpose(1, 2)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    k = repeat_kv(k, nh // nkv)
    v = repeat_kv(v, nh // nkv)
    attn = torch.matmul(q, k.transpose(2, 3)) * hd ** -0.5
    attn = attn + mask
    attn = torch.nn.functional.softmax(attn, dim=-1, dtype=torch.float32).to(q.dtype)
    out = torch.matmul(attn, v).transpose(1, 2).reshape(b, t, nh * hd)
    return out @ w["o_proj"].T


def mlp(x, w):
    return (torch.nn.functional.silu(x @ w["gate_proj"].T) * (x @ w["up_proj"].T)) @ w["down_proj"].T


def causal_mask(t, dtype):
    m = torch.full((t, t), torch.finfo(dtype).min, dtype=dtype).triu(1)
    return m[None, None]


def main():
    h, i = CFG["hidden_size"], CFG["intermediate_size"]
    nh, nkv, hd = CFG["num_attention_heads"], CFG["num_key_value_heads"], CFG["head_dim"]
    shapes = {
        "q_proj": (nh * hd, h), "k_proj": (nkv * hd, h), "v_proj": (nkv * hd, h), "o_proj": (h, nh * hd),
        "gate_proj": (i, h), "up_proj": (i, h), "down_proj": (h, i),
        "input_layernorm": (h,), "post_attention_layernorm": (h,),
    }
    w = {name: fill(shape, 0.37 + 0.01 * k, 0.5 * k, 0.3) for k, (name, shape) in enumerate(shapes.items())}
    w["input_layernorm"] = 1.0 + fill((h,), 0.9, 0.1, 0.2)
    w["post_attention_layernorm"] = 1.0 + fill((h,), 0.7, 0.3, 0.2)
    x = fill((B, T, h), 0.173, 0.0, 1.5)
    position_ids = torch.tensor([[0, 1, 2, 3, 4], [3, 4, 5, 6, 7]], dtype=torch.int64)

    inv_freq = default_inv_freq(hd, CFG["rope_theta"])
    cos, sin = rotary_cos_sin(inv_freq, position_ids, DT)
    q_in = fill((B, nh, T, hd), 0.21, 0.2, 1.0)
    k_in = fill((B, nkv, T, hd), 0.23, 0.4, 1.0)
    q_rot, k_rot = apply_rotary_pos_emb(q_in, k_in, cos, sin)

    mask = causal_mask(T, DT)
    normed = rms_norm(x, w["input_layernorm"], CFG["rms_norm_eps"])
    attn_out = attention(normed, w, cos, sin, mask)
    mlp_in = rms_norm(x, w["post_attention_layernorm"], CFG["rms_norm_eps"])
    mlp_out = mlp(mlp_in, w)
    hidden = x + attention(normed, w, cos, sin, mask)
    layer_out = hidden + mlp(rms_norm(hidden, w["post_attention_layernorm"], CFG["rms_norm_eps"]), w)

    llama3 = llama3_inv_freq(128, 500000.0, 8.0, 1.0, 4.0, 8192)

    def t(v):
        return {"shape": list(v.shape), "values": [float(a) for a in v.reshape(-1).tolist()]}

    out = {
        "generator": "tests/reference/make_layer_reference.py, torch " + torch.__version__,
        "config": CFG,
        "weights": {k: t(v) for k, v in w.items()},
        "x": t(x),
        "position_ids": position_ids.tolist(),
        "inv_freq": t(inv_freq),
        "cos": t(cos), "sin": t(sin),
        "q_in": t(q_in), "k_in": t(k_in), "q_rot": t(q_rot), "k_rot": t(k_rot),
        "rms_norm_out": t(normed),
        "attention_out": t(attn_out),
        "mlp_in": t(mlp_in),
        "mlp_out": t(mlp_out),
        "layer_out": t(layer_out),
        "llama3_inv_freq": {"head_dim": 128, "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
                            "values": [float(a) for a in llama3.tolist()]},
    }
    json.dump(out, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
