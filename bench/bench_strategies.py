#!/usr/bin/env python3
"""DDP, ZeRO-1, ZeRO-2 and FSDP, with and without optimizer offload, on 2 ranks: a full fine-tune of a
random ~50M-parameter LLaMA (make_random_model). Per strategy: throughput, time per step split into
compute / waiting on communication / optimizer (AdamW + parameter refresh, incl. ZeRO's all-gather),
the payload handed to collectives per step (metrics.jsonl comm_bytes) and what it means on the
wire, peak RSS of rank 0, and the bytes each rank's strategy holds (zero_worker's MemoryReport) in
fp32 and in bf16 mixed precision. Runs the real binaries and reads metrics.jsonl.
    /usr/bin/python3 bench/bench_strategies.py [--build build] [--steps 6] [--accumulation 1] [--repeat 1]
    /usr/bin/python3 bench/bench_strategies.py --cases zero2,fsdp,fsdp:fsdp_prefetch=0 --repeat 3 --no-memory
On a shared machine, --repeat N runs every case N times, interleaved, and keeps each case's
fastest run (timing noise from other processes only ever slows a run down).
"""
import argparse
import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

DEFAULT_CASES = "ddp,zero1,zero2,fsdp,ddp+offload,zero1+offload,zero2+offload,fsdp+offload"


def parse_case(text):
    """'fsdp+offload:fsdp_prefetch=0' -> (name, strategy, offload, ['parallel.fsdp_prefetch=0'])."""
    head, *settings = text.split(":")
    strategy, _, offload = head.partition("+")
    if strategy not in ("ddp", "zero1", "zero2", "fsdp") or offload not in ("", "offload"):
        sys.exit(f"bench_strategies: a case is STRATEGY[+offload][:parallel key=value...], got '{text}'")
    return text, strategy, offload == "offload", [f"parallel.{s}" for s in settings]


def run(cmd):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"bench_strategies: {' '.join(cmd)} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r.stdout


def overrides(strategy, offload, extra):
    out = [f"parallel.strategy={strategy}", f"parallel.offload_optimizer={'true' if offload else 'false'}"] + extra
    return [x for o in out for x in ("--set", o)]


def train(build, config, strategy, offload, extra, run_dir):
    run([os.path.join(build, "bin/ft_launch"), "--nproc_per_node", "2", os.path.join(build, "bin/ft_train"), config,
         "--set", f"run_dir={run_dir}"] + overrides(strategy, offload, extra))
    steps = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl")) if '"loss"' in l]
    steps = steps[1:] if len(steps) > 2 else steps  # the first step pays for warm-up
    med = lambda f: statistics.median(f(s) for s in steps)
    return {
        "tokens_per_s": med(lambda s: s["tokens_per_s"]),
        "step_s": med(lambda s: s["time"]["step"]),
        "compute_s": med(lambda s: s["time"]["compute"]),
        "comm_s": med(lambda s: s["time"]["communication"]),
        "optimizer_s": med(lambda s: s["time"]["optimizer"]),
        "comm_bytes": steps[-1]["comm_bytes"],
        "peak_rss": max(s["peak_rss_bytes"] for s in steps),
    }


def memory(build, config, strategy, offload, extra):
    out = run([os.path.join(build, "bin/ft_launch"), "--nproc_per_node", "2", os.path.join(build, "bin/zero_worker"),
               config] + overrides(strategy, offload, extra))
    for line in out.splitlines():
        if "MEMORY " in line and '"rank":0' in line:
            return json.loads(line.split("MEMORY ", 1)[1])
    sys.exit(f"bench_strategies: no MEMORY line from zero_worker:\n{out[-2000:]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--accumulation", type=int, default=1, help="micro-batches per step on each rank")
    parser.add_argument("--repeat", type=int, default=1, help="runs per case; the fastest is kept")
    parser.add_argument("--no-memory", action="store_true", help="skip the MemoryReport tables")
    parser.add_argument("--cases", default=DEFAULT_CASES,
                        help="comma-separated STRATEGY[+offload][:parallel key=value...] (default: all eight)")
    args = parser.parse_args()
    cases = [parse_case(c) for c in args.cases.split(",")]
    tmp = tempfile.mkdtemp(prefix="bench_strategies_")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)  # its runs' models and checkpoints: gigabytes
    model = os.path.join(tmp, "model50m")
    run([os.path.join(args.build, "bin/make_random_model"), "--out", model])
    config = os.path.join(tmp, "full.json")
    micro = 4
    json.dump({"run_dir": "unused", "model": {"path": model},
               "data": {"train": "tests/data/datasets/alpaca_train.json", "max_seq_len": 128},
               "train": {"global_batch_size": 2 * micro * args.accumulation, "micro_batch_size": micro, "lr": 1e-4,
                         "threads": 1, "max_steps": args.steps},
               "log": {"every_steps": 1, "eval_every_steps": 0}}, open(config, "w"))
    extra = ["data.eval=", "train.threads=1"]

    print(f"2 ranks x 1 thread, full fine-tune of a random 50M LLaMA, fp32, micro-batch {micro} x 128 tokens, "
          f"accumulation {args.accumulation}, {args.steps} steps (median of steps 2..)")
    print(f"{'strategy':<24}{'tokens/s':>10}{'step s':>9}{'compute':>9}{'comm wait':>10}{'optimizer':>10}"
          f"{'payload MB':>12}{'sent MB/rank':>14}{'peak RSS MB':>13}")
    best = {}
    for rep in range(args.repeat):
        for i, (name, strategy, offload, settings) in enumerate(cases):
            r = train(args.build, config, strategy, offload, extra + settings, os.path.join(tmp, f"run_{i}_{rep}"))
            if name not in best or r["tokens_per_s"] > best[name]["tokens_per_s"]:
                best[name] = r
    W = 2
    for name, strategy, offload, settings in cases:
        r = best[name]
        # Sent per rank: all-reduce 2(W-1)/W, reduce-scatter and all-gather (W-1)/W of their payloads
        # (ZeRO-1's payload is half all-reduce, half all-gather).
        if strategy == "ddp":
            sent = r["comm_bytes"] * 2 * (W - 1) / W
        elif strategy == "zero1":
            sent = r["comm_bytes"] / 2 * 2 * (W - 1) / W + r["comm_bytes"] / 2 * (W - 1) / W
        else:  # ZeRO-2 and FSDP: reduce-scatters and all-gathers only
            sent = r["comm_bytes"] * (W - 1) / W
        print(f"{name:<24}{r['tokens_per_s']:>10.0f}{r['step_s']:>9.3f}{r['compute_s']:>9.3f}{r['comm_s']:>10.3f}"
              f"{r['optimizer_s']:>10.3f}{r['comm_bytes'] / 1e6:>12.1f}{sent / 1e6:>14.1f}{r['peak_rss'] / 1e6:>13.0f}",
              flush=True)

    if args.no_memory:
        return
    for precision in ("fp32", "bf16"):
        print(f"\nbytes each rank's strategy holds ({precision}, W = 2; MemoryReport from zero_worker), MB:")
        print(f"{'strategy':<24}{'params':>9}{'grads':>9}{'optimizer':>11}{'host opt':>10}{'host grads':>12}"
              f"{'staging':>9}{'gathered':>10}{'device total':>14}{'per Ψ':>7}")
        for name, strategy, offload, settings in cases:
            m = memory(args.build, config, strategy, offload, extra + settings + [f"train.precision={precision}"])
            # Model state on the device (FSDP's gathered units are transient, shown apart).
            device = m["parameters"] + m["gradients"] + m["optimizer"]
            print(f"{name:<24}{m['parameters'] / 1e6:>9.1f}{m['gradients'] / 1e6:>9.1f}{m['optimizer'] / 1e6:>11.1f}"
                  f"{m['host_optimizer'] / 1e6:>10.1f}{m['host_gradients'] / 1e6:>12.1f}{m['grad_staging'] / 1e6:>9.1f}"
                  f"{m['gathered'] / 1e6:>10.1f}"
                  f"{device / 1e6:>14.1f}{device / m['psi']:>7.2f}", flush=True)


if __name__ == "__main__":
    main()
