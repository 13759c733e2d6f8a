#!/usr/bin/env python3
"""Prints docs/memory.md's table of ft_plan for the shipped LLaMA-2 configs on 1, 2, 4 and 8 x 24 GB
(GB per GPU at the largest micro-batch that fits, micro-batch x accumulation; "no (N)": needs N GB
at micro-batch 1), from the config.json files bundled in configs/models (no weights needed: ft_plan
finds them by the configs' model folder names).
    scripts/plan_table.py [build/bin/ft_plan]
"""
import json
import subprocess
import sys

CONFIGS = ["llama7b_lora.json", "llama7b_zero2.json", "llama13b_zero2.json", "llama13b_fsdp.json"]


def cell(row):
    if row["fits"]:
        return f'{row["total_bytes"] / 1e9:.1f} (m {row["micro_batch"]} x {row["grad_accum"]})'
    return f'no ({row["total_bytes"] / 1e9:.0f})'


def main():
    ft_plan = sys.argv[1] if len(sys.argv) > 1 else "build/bin/ft_plan"
    print("| config | GPUs | LoRA row | `ddp` | `zero1` | `zero2` | `fsdp` |")
    print("|---|---|---|---|---|---|---|")
    for config in CONFIGS:
        for gpus in (1, 2, 4, 8):
            out = subprocess.run([ft_plan, f"configs/{config}", "--gpus", str(gpus), "--json"],
                                 check=True, capture_output=True, text=True).stdout
            rows = json.loads(out)["strategies"]
            print(f"| `{config}` | {gpus} | " + " | ".join(cell(r) for r in rows) + " |")


if __name__ == "__main__":
    main()
