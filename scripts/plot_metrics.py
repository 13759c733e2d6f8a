#!/usr/bin/env python3
"""Draws a run's RUN_DIR/metrics.jsonl as one PNG: training loss and eval loss against the step,
and throughput (tokens/s). Needs matplotlib (Debian python3-matplotlib, installed by setup.sh).
    /usr/bin/python3 scripts/plot_metrics.py runs/tiny_lora            # writes runs/tiny_lora/metrics.png
    /usr/bin/python3 scripts/plot_metrics.py runs/tiny_lora -o out.png
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
    parser.add_argument("run_dir")
    parser.add_argument("-o", "--output", help="PNG to write (default RUN_DIR/metrics.png)")
    args = parser.parse_args()
    path = os.path.join(args.run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        sys.exit(f"plot_metrics: {path} does not exist (is {args.run_dir} a run folder?)")
    steps, loss, tokens = [], [], []
    eval_steps, eval_loss = [], []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"plot_metrics: {path}:{number}: not JSON ({e})")
            if "eval_loss" in record:
                eval_steps.append(record["step"])
                eval_loss.append(record["eval_loss"])
            elif "loss" in record:
                steps.append(record["step"])
                loss.append(record["loss"])
                tokens.append(record.get("tokens_per_s", float("nan")))
    if not steps and not eval_steps:
        sys.exit(f"plot_metrics: {path} has no metrics yet")

    fig, (ax_loss, ax_speed) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    ax_loss.plot(steps, loss, label="train loss", linewidth=1)
    if eval_steps:
        ax_loss.plot(eval_steps, eval_loss, "o-", label="eval loss")
    ax_loss.set_ylabel("loss (nats/token)")
    ax_loss.legend()
    ax_loss.grid(alpha=0.3)
    ax_loss.set_title(os.path.basename(os.path.normpath(args.run_dir)))
    ax_speed.plot(steps, tokens, color="tab:green", linewidth=1)
    ax_speed.set_ylabel("tokens/s (all ranks)")
    ax_speed.set_xlabel("optimizer step")
    ax_speed.grid(alpha=0.3)
    fig.tight_layout()
    output = args.output or os.path.join(args.run_dir, "metrics.png")
    fig.savefig(output, dpi=100)
    print(f"plot_metrics: wrote {output}")


if __name__ == "__main__":
    main()
