#!/usr/bin/env python3
# Cross-checks an ft LoRA adapter with Hugging Face PEFT. Needs python3 with torch, transformers
# and peft (not installable on ft's build machines, so no test runs it). Usage:
#   ft_merge --base BASE --adapter RUN_DIR/adapter --out MERGED         # optional, for --merged
#   python3 scripts/check_adapter_with_peft.py --base BASE --adapter RUN_DIR/adapter \
#       [--merged MERGED] [--prompt "Once upon a time"]
# Loads BASE with transformers, applies the adapter with PeftModel.from_pretrained, prints the
# greedy continuation (compare with `ft_generate --model BASE --adapter RUN_DIR/adapter
# --prompt ... --temperature 0 --max-new-tokens 40`) and, with --merged, the max |logits| gap
# between PEFT's base + adapter and ft_merge's folder (expect ~1e-5 in fp32).
import argparse

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base", required=True)
    p.add_argument("--adapter", required=True)
    p.add_argument("--merged")
    p.add_argument("--prompt", default="Once upon a time")
    a = p.parse_args()

    tok = AutoTokenizer.from_pretrained(a.base)
    ids = tok(a.prompt, return_tensors="pt").input_ids
    base = AutoModelForCausalLM.from_pretrained(a.base, torch_dtype=torch.float32)
    peft = PeftModel.from_pretrained(base, a.adapter).eval()
    with torch.no_grad():
        logits = peft(ids).logits
        out = peft.generate(input_ids=ids, max_new_tokens=40, do_sample=False)
    print("ids:", ids[0].tolist())
    print("last-position top-5:", torch.topk(logits[0, -1], 5))
    print("PEFT greedy:", tok.decode(out[0], skip_special_tokens=True))
    if a.merged:
        merged = AutoModelForCausalLM.from_pretrained(a.merged, torch_dtype=torch.float32).eval()
        with torch.no_grad():
            gap = (merged(ids).logits - logits).abs().max().item()
        print(f"max |logits(ft_merge folder) - logits(PEFT base + adapter)| = {gap:.3g}")


if __name__ == "__main__":
    main()
