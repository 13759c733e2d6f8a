"""The LLaMA training step ft runs, written in eager PyTorch: what bench_vs_pytorch.py and
profile_step.py time ft against. Hugging Face's modeling_llama arithmetic (RMSNorm in fp32,
rotate_half rotary, SwiGLU, attention eager on torch 1.x and scaled_dot_product_attention on 2.x,
as ft's `auto`), PEFT's LoRA (dropout 0: no dropout pass), cross-entropy over full logits,
torch.nn.utils.clip_grad_norm_ and torch.optim.AdamW with their defaults. Works on Debian's torch
1.13 and on the pip torch 2.x; needs nothing else (the safetensors file is read here).
"""
import json
import math
import struct

import torch
import torch.nn.functional as F

SDPA = hasattr(F, "scaled_dot_product_attention")


def set_threads(n):
    """torch.set_num_threads(n), and the same for OpenBLAS, whose own thread pool torch does not
    size (Debian's torch): without it a "one-thread" eager step ran its matrix products on every
    core (119 against 62 GFLOP/s for a 2048^3 product on 2 cores). ft sizes it too
    (util/cpu_threads.cpp)."""
    import ctypes
    torch.set_num_threads(n)
    with open("/proc/self/maps") as maps:
        libs = {line.split()[-1] for line in maps if "openblas" in line or "libblas" in line}
    for lib in libs:
        try:
            ctypes.CDLL(lib).openblas_set_num_threads(n)
        except (OSError, AttributeError):
            pass
_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def load_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[begin:end]), dtype=_DTYPES[info["dtype"]])
        out[name] = t.reshape(info["shape"]).clone()
    return out


class LoraLinear(torch.nn.Module):
    def __init__(self, weight, r, alpha):
        super().__init__()
        self.weight = torch.nn.Parameter(weight, requires_grad=r == 0)
        if r:
            self.lora_A = torch.nn.Parameter(torch.empty(r, weight.shape[1]))
            torch.nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
            self.lora_B = torch.nn.Parameter(torch.zeros(weight.shape[0], r))
            self.scale = alpha / r
        self.r = r

    def forward(self, x):
        y = F.linear(x, self.weight)
        if self.r:
            y = y + F.linear(F.linear(x, self.lora_A), self.lora_B) * self.scale
        return y


def rms_norm(x, weight, eps):
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Layer(torch.nn.Module):
    def __init__(self, w, i, c, lora):
        super().__init__()
        p = f"model.layers.{i}."
        r, alpha, targets = lora
        self.proj = torch.nn.ModuleDict()
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            self.proj[name] = LoraLinear(w[p + "self_attn." + name + ".weight"], r if name in targets else 0, alpha)
        for name in ("gate_proj", "up_proj", "down_proj"):
            self.proj[name] = LoraLinear(w[p + "mlp." + name + ".weight"], r if name in targets else 0, alpha)
        self.norm1 = torch.nn.Parameter(w[p + "input_layernorm.weight"], requires_grad=r == 0)
        self.norm2 = torch.nn.Parameter(w[p + "post_attention_layernorm.weight"], requires_grad=r == 0)
        self.c = c

    def forward(self, x, cos, sin, mask):
        c = self.c
        b, t, _ = x.shape
        nh, nkv, hd = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"]), c["head_dim"]
        h = rms_norm(x, self.norm1, c["rms_norm_eps"])
        q = self.proj["q_proj"](h).view(b, t, nh, hd).transpose(1, 2)
        k = self.proj["k_proj"](h).view(b, t, nkv, hd).transpose(1, 2)
        v = self.proj["v_proj"](h).view(b, t, nkv, hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        if nkv != nh:
            k = k.repeat_interleave(nh // nkv, dim=1)
            v = v.repeat_interleave(nh // nkv, dim=1)
        if SDPA:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(hd)
            a = torch.matmul(torch.softmax(scores.float() + mask, -1).to(q.dtype), v)
        x = x + self.proj["o_proj"](a.transpose(1, 2).reshape(b, t, nh * hd))
        h = rms_norm(x, self.norm2, c["rms_norm_eps"])
        return x + self.proj["down_proj"](F.silu(self.proj["gate_proj"](h)) * self.proj["up_proj"](h))


class EagerLlama(torch.nn.Module):
    """model_dir: an HF folder (config.json, model.safetensors); lora: (r, alpha, targets) or r = 0."""

    def __init__(self, model_dir, lora=(0, 0, ())):
        super().__init__()
        c = json.load(open(f"{model_dir}/config.json"))
        c.setdefault("head_dim", c["hidden_size"] // c["num_attention_heads"])
        w = load_safetensors(f"{model_dir}/model.safetensors")
        full = lora[0] == 0
        self.embed = torch.nn.Parameter(w["model.embed_tokens.weight"], requires_grad=full)
        self.layers = torch.nn.ModuleList(Layer(w, i, c, lora) for i in range(c["num_hidden_layers"]))
        self.norm = torch.nn.Parameter(w["model.norm.weight"], requires_grad=full)
        head = w.get("lm_head.weight")
        self.head = self.embed if head is None else torch.nn.Parameter(head, requires_grad=full)
        hd = c["head_dim"]
        self.inv_freq = 1.0 / (c.get("rope_theta", 10000.0) ** (torch.arange(0, hd, 2).float() / hd))
        self.c = c

    def forward(self, ids):
        t = ids.shape[1]
        freqs = torch.arange(t).float()[:, None] * self.inv_freq
        emb = torch.cat((freqs, freqs), -1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        mask = torch.full((t, t), torch.finfo(torch.float32).min).triu(1)
        x = F.embedding(ids, self.embed)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return F.linear(rms_norm(x, self.norm, self.c["rms_norm_eps"]), self.head)


def train_step(model, optimizer, ids, labels):
    """One optimizer step on one micro-batch: the loss summed over target tokens / their count."""
    logits = model(ids)
    v = logits.shape[-1]
    targets = labels[:, 1:].reshape(-1)
    loss_sum = F.cross_entropy(logits[:, :-1].reshape(-1, v).float(), targets, ignore_index=-100, reduction="sum")
    loss = loss_sum / (targets != -100).sum()
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


def make_optimizer(model, lr):
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
