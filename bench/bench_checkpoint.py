#!/usr/bin/env python3
"""Checkpoint save and load: time, size, and how long a save blocks training, per strategy, on 2
ranks, for the tiny stories260K model (LoRA and full) and a random ~100M-parameter LLaMA
(make_random_model: hidden 768, 14 layers, SwiGLU 2048). Each case trains 4 steps with a
checkpoint after every step (metrics.jsonl "checkpoint_s": the whole collective save, training
waits for it): the first save mostly lands in the page cache, later ones wait for the disk to
take the previous one (the steady state), so both are shown. Then it resumes from step 2 in a fresh
run folder and reads the load time from the log ("training state loaded ... in X s": manifest,
checksums, every rank's shard read and placed).
With --async (checkpoint.async): a checkpoint every 2 steps of 6, "save s" is the time a save
held training (the host copies; a save still in flight when the next one comes is waited for),
and "next step s" the median step right after a save, while the writer threads work beside it.
    /usr/bin/python3 bench/bench_checkpoint.py [--build build] [--skip-100m] [--async] [--only SUBSTRING]
"""
import argparse
import atexit
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ALPACA = "tests/data/datasets/alpaca_train.json"


def run(cmd):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"bench_checkpoint: {' '.join(cmd)} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r.stdout + r.stderr


def folder_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def case(build, tmp, name, model, strategy, lora, seq_len, background):
    every, steps = (2, 6) if background else (1, 4)
    config = {"run_dir": os.path.join(tmp, name, "run"), "model": {"path": model},
              "data": {"train": ALPACA, "max_seq_len": seq_len},
              "parallel": {"strategy": strategy},
              "train": {"global_batch_size": 4, "micro_batch_size": 2, "lr": 1e-4, "threads": 1, "max_steps": steps},
              "checkpoint": {"every_steps": every, "keep_last": 5, "async": background},
              "log": {"every_steps": 1, "eval_every_steps": 0}}
    if lora:
        config["lora"] = {"r": 16, "alpha": 32, "target_modules": "all-linear"}
    os.makedirs(os.path.join(tmp, name), exist_ok=True)
    path = os.path.join(tmp, name, "config.json")
    json.dump(config, open(path, "w"))
    launch = [os.path.join(build, "bin/ft_launch"), "--nproc_per_node", "2", os.path.join(build, "bin/ft_train"), path]
    run(launch)
    records = [json.loads(l) for l in open(os.path.join(config["run_dir"], "metrics.jsonl"))]
    saves = [r["checkpoint_s"] for r in records if "checkpoint_s" in r]
    step_s = {r["step"]: r["time"]["step"] for r in records if "loss" in r}
    steps = [step_s[k] for k in sorted(step_s)]
    after_save = [step_s[k + 1] for k in sorted(step_s) if k % every == 0 and k + 1 in step_s]
    ckpt = os.path.join(config["run_dir"], "checkpoints", "step_000002")
    size = folder_bytes(ckpt)
    weights = folder_bytes(os.path.join(ckpt, "adapter" if lora else "model"))
    # Resume from step 2 into a fresh run folder: the load is what it costs to restart.
    config["run_dir"] = os.path.join(tmp, name, "resumed")
    json.dump(config, open(path, "w"))
    out = run(launch + ["--resume", ckpt])
    loads = [float(x) for x in re.findall(r"training state loaded from \S+ in ([0-9.e+-]+) s", out)]
    shutil.rmtree(os.path.join(tmp, name))
    return {"case": name, "first_save_s": saves[0], "save_s": statistics.median(saves[1:]), "load_s": max(loads),
            "step_s": statistics.median(steps[1:]), "next_step_s": statistics.median(after_save),
            "bytes": size, "weights_bytes": weights}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--skip-100m", action="store_true")
    parser.add_argument("--async", dest="background", action="store_true", help="checkpoint.async: true")
    parser.add_argument("--only", default="", help="the cases whose name contains this")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench_checkpoint_")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)  # its runs' models and checkpoints: gigabytes
    tiny = "tests/data/stories260K"
    cases = [("tiny lora ddp", tiny, "ddp", True, 256)] + [
        (f"tiny full {s}", tiny, s, False, 256) for s in ("ddp", "zero1", "zero2", "fsdp")]
    if not args.skip_100m:
        big = os.path.join(tmp, "model100m")
        run([os.path.join(args.build, "bin/make_random_model"), "--out", big, "--hidden", "768", "--layers", "14",
             "--heads", "12", "--intermediate", "2048"])
        cases += [("100M lora ddp", big, "ddp", True, 256)] + [
            (f"100M full {s}", big, s, False, 256) for s in ("ddp", "zero1", "zero2", "fsdp")]
    print(f"{'case':<18} {'size MB':>9} {'weights MB':>11} {'1st save s':>11} {'save s':>8} {'load s':>8} {'step s':>8} "
          f"{'next step s':>12} {'save/step':>10}")
    for name, model, strategy, lora, seq in cases:
        if args.only not in name:
            continue
        r = case(args.build, tmp, name.replace(" ", "_"), model, strategy, lora, seq, args.background)
        print(f"{name:<18} {r['bytes'] / 1e6:>9.1f} {r['weights_bytes'] / 1e6:>11.1f} {r['first_save_s']:>11.3f} {r['save_s']:>8.3f} "
              f"{r['load_s']:>8.3f} {r['step_s']:>8.3f} {r['next_step_s']:>12.3f} {r['save_s'] / r['step_s']:>10.2f}",
              flush=True)
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
