#!/usr/bin/env python3
"""DDP numbers: 2 ranks x 1 thread against 1 rank x 1 thread, for the tiny LoRA config, LoRA r=16 on
every linear layer of a random ~50M-parameter LLaMA, and a full-parameter fine-tune of it; per step, the time spent waiting on
gradient communication with and without overlap; the bytes each rank sends per step with fp32
and bf16 gradients; and the 2-rank work run as two independent processes (no communication),
which bounds what 2 ranks can reach on this machine. Runs the real binaries (ft_launch, ft_train) and reads metrics.jsonl.
    /usr/bin/python3 bench/bench_ddp.py [--build build] [--steps 6] [--repeats 3] [--only "50M LoRA"]
A shared VM's speed drifts by tens of percent from minute to minute: the 1-rank and 2-rank runs of
a case alternate --repeats times and each keeps its best run (the median step of a run); the
spread of the runs is printed beside it.
"""
import argparse
import atexit
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile


def start_train(build, ranks, config, overrides, run_dir):
    cmd = [os.path.join(build, "bin/ft_train"), config, "--set", f"run_dir={run_dir}"]
    for o in overrides:
        cmd += ["--set", o]
    if ranks > 1:
        cmd = [os.path.join(build, "bin/ft_launch"), "--nproc_per_node", str(ranks)] + cmd
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return cmd, proc, run_dir


def finish_train(started):
    cmd, proc, run_dir = started
    out, err = proc.communicate()
    if proc.returncode != 0:
        sys.exit(f"bench_ddp: {' '.join(cmd)} failed:\n{out[-3000:]}\n{err[-3000:]}")
    steps = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl")) if '"loss"' in l]
    steps = steps[1:] if len(steps) > 2 else steps  # the first step pays for warm-up
    return {
        "tokens_per_s": statistics.median(s["tokens_per_s"] for s in steps),
        "step_s": statistics.median(s["time"]["step"] for s in steps),
        "comm_s": statistics.median(s["time"]["communication"] for s in steps),
        "comm_bytes": steps[-1].get("comm_bytes", 0),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each side per case, alternating; best kept")
    parser.add_argument("--only", default="", help="only the cases whose name contains this")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench_ddp_")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)  # its runs' models and checkpoints: gigabytes
    model50 = os.path.join(tmp, "model50m")
    subprocess.run([os.path.join(args.build, "bin/make_random_model"), "--out", model50], check=True,
                   capture_output=True)
    full, lora50 = os.path.join(tmp, "full.json"), os.path.join(tmp, "lora50.json")
    config = {"run_dir": "unused", "model": {"path": model50},
              "data": {"train": "tests/data/datasets/alpaca_train.json", "max_seq_len": 128},
              "train": {"global_batch_size": 8, "micro_batch_size": 4, "lr": 1e-4, "threads": 1,
                        "max_steps": args.steps},
              "log": {"every_steps": 1}}
    json.dump(config, open(full, "w"))
    json.dump(dict(config, lora={"r": 16, "alpha": 32, "target_modules": "all-linear"}), open(lora50, "w"))
    common = [f"train.max_steps={args.steps}", "log.every_steps=1", "log.eval_every_steps=0", "data.eval=",
              "train.threads=1"]
    run_dirs = (os.path.join(tmp, f"run{i}") for i in itertools.count(1))

    def show(name, ranks, r, runs):
        spread = "" if len(runs) < 2 else f" (runs {min(runs):.3f}-{max(runs):.3f} s)"
        print(f"{name:<44} ranks {ranks}: {r['tokens_per_s']:9.0f} tokens/s, step {r['step_s']:.3f} s{spread}, "
              f"waiting on communication {r['comm_s']:.3f} s, all-reduce payload {r['comm_bytes'] / 1e6:.1f} MB",
              flush=True)

    def start(config, ranks, extra):
        return start_train(args.build, ranks, config, common + extra, next(run_dirs))

    def run(config, ranks, extra):
        return finish_train(start(config, ranks, extra))

    def independent_pair(config):
        """Two 1-rank runs at once, each with a 2-rank run's share (micro-batch 4, global batch 4):
        a 2-rank step without any communication. Its step time against the 1-rank run's is what
        this machine allows (cores, caches and memory shared, smaller matrix products)."""
        started = [start(config, 1, ["train.micro_batch_size=4", "train.global_batch_size=4"]) for _ in range(2)]
        return statistics.mean(finish_train(s)["step_s"] for s in started)

    def compare(name, config, two_name=None):
        """1 rank at micro-batch 8 against 2 ranks at 4 (the same global batch), alternating; and
        the same 2-rank work as two independent processes."""
        ones, twos, pairs = [], [], []
        for _ in range(args.repeats):
            ones.append(run(config, 1, ["train.micro_batch_size=8"]))
            twos.append(run(config, 2, ["train.micro_batch_size=4"]))
            pairs.append(independent_pair(config))
        one = min(ones, key=lambda r: r["step_s"])
        two = min(twos, key=lambda r: r["step_s"])
        show(name, 1, one, [r["step_s"] for r in ones])
        show(two_name or name, 2, two, [r["step_s"] for r in twos])
        print(f"  -> 2-rank / 1-rank throughput: {two['tokens_per_s'] / one['tokens_per_s']:.2f}x", flush=True)
        print(f"  -> the same work as two independent 1-rank processes, no communication: step {min(pairs):.3f} s "
              f"(runs {min(pairs):.3f}-{max(pairs):.3f} s), so this machine allows {one['step_s'] / min(pairs):.2f}x",
              flush=True)
        return one, two

    def wanted(name):
        return args.only in name

    if wanted("tiny LoRA"):
        compare("tiny LoRA (tiny_lora.json, 46K trainable)", "configs/tiny_lora.json")
    if wanted("50M LoRA"):
        compare("50M LoRA (r=16, all linear layers)", lora50)
    if wanted("50M full"):
        _, two = compare("50M full fine-tune, fp32", full, two_name="50M full fine-tune, fp32 grads, overlap")
        no = run(full, 2, ["train.micro_batch_size=4", "parallel.overlap_grad_reduce=false"])
        show("50M full fine-tune, fp32 grads, no overlap", 2, no, [])
        bf = run(full, 2, ["train.micro_batch_size=4", "parallel.grad_comm_dtype=bf16"])
        show("50M full fine-tune, bf16 grads, overlap", 2, bf, [])
        print(f"  -> waiting on communication per step: {two['comm_s']:.3f} s with overlap, {no['comm_s']:.3f} s without")
        # A ring all-reduce sends 2 (W-1)/W of the payload per rank (Gloo's measured factor: tests/dist).
        for name, r in (("fp32", two), ("bf16", bf)):
            print(f"  -> bytes sent per rank per step, {name} gradients: {r['comm_bytes'] * 2 * (2 - 1) / 2 / 1e6:.1f} MB")

if __name__ == "__main__":
    main()
