#!/usr/bin/env python3
"""Draws ft_bench's bench.json as one PNG: tokens/s against world size with the ideal (linear from
the smallest world size) line and each point's scaling efficiency, and the mean step time split
into data wait, compute, communication and optimizer per world size, with MFU. ft_bench runs it;
needs matplotlib (Debian python3-matplotlib, installed by setup.sh).
    /usr/bin/python3 scripts/plot_bench.py runs/bench_tiny_lora/bench.json -o bench.png
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench_json")
    parser.add_argument("-o", "--output", help="PNG to write (default: bench.png beside the JSON)")
    args = parser.parse_args()
    try:
        with open(args.bench_json, encoding="utf-8") as f:
            report = json.load(f)
        rows = report["results"]
    except (OSError, json.JSONDecodeError, KeyError) as e:
        sys.exit(f"plot_bench: {args.bench_json}: not an ft_bench report ({e})")
    if not rows:
        sys.exit(f"plot_bench: {args.bench_json} has no results")
    ranks = [r["ranks"] for r in rows]
    tokens = [r["tokens_per_s"] for r in rows]
    ideal = [tokens[0] / ranks[0] * w for w in ranks]

    fig, (ax_speed, ax_time) = plt.subplots(1, 2, figsize=(11, 4.5))
    ax_speed.plot(ranks, ideal, "--", color="gray", label="ideal (linear)")
    ax_speed.plot(ranks, tokens, "o-", color="tab:blue", label="measured")
    for r in rows:
        ax_speed.annotate(f'{100 * r["scaling_efficiency"]:.0f}%', (r["ranks"], r["tokens_per_s"]),
                          textcoords="offset points", xytext=(0, 8), ha="center")
    ax_speed.set_xlabel("ranks")
    ax_speed.set_ylabel("tokens/s (all ranks)")
    ax_speed.set_xticks(ranks)
    ax_speed.grid(alpha=0.3)
    ax_speed.legend()
    ax_speed.set_title(f'{os.path.basename(report["config"])}, {report["precision"]} on {report["device"]}')

    parts = [("data_wait", "data wait", "tab:gray"), ("compute", "compute", "tab:blue"),
             ("communication", "communication", "tab:orange"), ("optimizer", "optimizer", "tab:green")]
    labels = [str(w) for w in ranks]
    bottom = [0.0] * len(rows)
    for key, name, color in parts:
        values = [r["time"][key] for r in rows]
        ax_time.bar(labels, values, bottom=bottom, label=name, color=color)
        bottom = [b + v for b, v in zip(bottom, values)]
    for i, r in enumerate(rows):
        ax_time.annotate(f'MFU {100 * r["mfu"]:.1f}%', (i, r["time"]["step"]), textcoords="offset points",
                         xytext=(0, 4), ha="center")
    ax_time.set_ylim(0, max(r["time"]["step"] for r in rows) * 1.25)  # room for the MFU labels
    ax_time.set_xlabel("ranks")
    ax_time.set_ylabel("mean step time (s)")
    ax_time.set_title(f'peak {report["peak_flops_per_s"] / 1e9:.0f} GFLOP/s measured')
    ax_time.legend(fontsize="small", loc="lower right")
    ax_time.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    output = args.output or os.path.join(os.path.dirname(args.bench_json), "bench.png")
    fig.savefig(output, dpi=100)
    print(f"plot_bench: wrote {output}")


if __name__ == "__main__":
    main()
