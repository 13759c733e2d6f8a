#!/usr/bin/env python3
"""Makes tests/data/qwen2-tiny/: a Qwen2ForCausalLM of 0.2M parameters, initialised by
transformers from a fixed seed and then trained for 300 AdamW steps on the plain text of
tests/data/datasets/alpaca_train.json (so it has learned something, and fine-tuning it is
fine-tuning, not training from noise), saved by transformers' save_pretrained, with
the Qwen2-style byte-level BPE tokenizer of tests/data/qwen2-tokenizer-tiny (tokenizer.json, NFC,
Qwen2's split regex, <|endoftext|> <|im_start|> <|im_end|>). It is the second bundled model:
tokenizer.json instead of tokenizer.model, q/k/v biases, tied embeddings as Qwen2.5-0.5B, a
vocabulary padded past the tokenizer's ids as Qwen's are. Run from the repo root with the pinned
interop environment:
    .venv/bin/python3 tests/reference/make_tiny_qwen2.py
"""
import json
import os
import shutil

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

OUT = "tests/data/qwen2-tiny"
TOKENIZER = "tests/data/qwen2-tokenizer-tiny"

torch.manual_seed(20)
config = Qwen2Config(
    vocab_size=1536, hidden_size=64, intermediate_size=172, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-6, rope_theta=1000000.0,
    tie_word_embeddings=True, use_sliding_window=False, bos_token_id=None, eos_token_id=1502,
    pad_token_id=1500, torch_dtype="float32")
model = Qwen2ForCausalLM(config).eval()
with torch.no_grad():  # transformers initialises biases to 0; give them values so that they matter
    for layer in model.model.layers:
        for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
            proj.bias.normal_(0.0, 0.02)

# Pre-training: the outputs of alpaca_train.json as one stream of text, <|endoftext|> between
# records, in rows of 128 tokens; one thread, so that the result does not depend on the machine.
from tokenizers import Tokenizer
torch.set_num_threads(1)
tok = Tokenizer.from_file(os.path.join(TOKENIZER, "tokenizer.json"))
stream = []
for r in json.load(open("tests/data/datasets/alpaca_train.json", encoding="utf-8")):
    stream += tok.encode(r["instruction"] + "\n" + r["output"], add_special_tokens=False).ids + [1500]
rows = torch.tensor(stream[: len(stream) // 128 * 128]).view(-1, 128)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
generator = torch.Generator().manual_seed(0)
for step in range(300):
    batch = rows[torch.randint(0, rows.size(0), (16,), generator=generator)]
    loss = model(input_ids=batch, labels=batch).loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 50 == 0 or step == 299:
        print("step", step, "loss", round(loss.item(), 4))
model.eval()
os.makedirs(OUT, exist_ok=True)
model.save_pretrained(OUT, safe_serialization=True)
for name in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copyfile(os.path.join(TOKENIZER, name), os.path.join(OUT, name))
# Qwen2.5-Instruct's generation_config.json stops at <|im_end|> and <|endoftext|>.
with open(os.path.join(OUT, "generation_config.json"), "w") as f:
    json.dump({"eos_token_id": [1502, 1500], "pad_token_id": 1500}, f, indent=2)
    f.write("\n")
print(sum(p.numel() for p in model.parameters()), "parameters written to", OUT)
