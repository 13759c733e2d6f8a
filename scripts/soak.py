#!/usr/bin/env python3
"""Soak: a 2-rank training under `ft_launch --max-restarts` while a separate loop SIGKILLs a random
rank every few seconds, at random moments (during checkpoint saves too). At the end the run's
adapter and the losses of every step must equal an uninterrupted run of the same config, bit for
bit. Reports restarts, kills that landed during a checkpoint save, steps redone and time lost.

    scripts/soak.sh [MINUTES]      # default 2; builds first (scripts/build.sh)
    scripts/soak.py --build build --minutes 2 [--seed N] [--keep] [--async]

--async saves the killed run's checkpoints in the background (checkpoint.async): kills then land
in the writer threads too, and the reference still saves synchronously.

The run: LoRA on the tiny stories260K model (tests/data), 2 ranks x 1 thread, a checkpoint every
5 steps, as many steps as the uninterrupted run does in about half of MINUTES (measured first), so
that the killed run, which redoes steps and restarts, lasts about MINUTES.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def write_config(folder, steps, background=False):
    data = os.path.join(ROOT, "tests", "data")
    config = {
        "run_dir": os.path.join(folder, "run"),
        "model": {"path": os.path.join(data, "stories260K")},
        "data": {"train": os.path.join(data, "datasets", "alpaca_train.json"),
                 "eval": os.path.join(data, "datasets", "alpaca_eval.jsonl"), "max_seq_len": 64,
                 "template": {"base": "alpaca", "prompt": "{instruction}\n", "prompt_with_input": "{instruction}\n{input}\n"}},
        "lora": {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]},
        "parallel": {"timeout_s": 30},
        "train": {"global_batch_size": 8, "micro_batch_size": 2, "epochs": 1000, "lr": 1e-3, "warmup_steps": 2,
                  "threads": 1, "max_steps": steps},
        "checkpoint": {"every_steps": 5, "keep_last": 2, "async": background},
        "log": {"every_steps": 1},
    }
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "config.json")
    with open(path, "w") as f:
        json.dump(config, f, indent=2)
    return path


def launch_command(build, config, max_restarts=0):
    command = [os.path.join(build, "bin", "ft_launch"), "--nproc_per_node", "2"]
    if max_restarts:
        command += ["--max-restarts", str(max_restarts)]
    return command + [os.path.join(build, "bin", "ft_train"), config]


def run_once(build, folder, steps):
    """An uninterrupted run; returns its wall time."""
    config = write_config(folder, steps)
    start = time.monotonic()
    with open(os.path.join(folder, "output.log"), "w") as log:
        code = subprocess.run(launch_command(build, config), stdout=log, stderr=subprocess.STDOUT,
                              env=dict(os.environ, OMP_NUM_THREADS="1")).returncode
    if code != 0:
        sys.exit(f"soak: the uninterrupted run failed ({code}): see {folder}/output.log")
    return time.monotonic() - start


def step_losses(folder):
    """{step: loss} from metrics.jsonl, the last entry of each step (a redone step may be logged again)."""
    losses = {}
    with open(os.path.join(folder, "run", "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if "loss" in m and "step" in m:
                losses[m["step"]] = m["loss"]
    return losses


def adapter_bytes(folder):
    with open(os.path.join(folder, "run", "adapter", "adapter_model.safetensors"), "rb") as f:
        return f.read()


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def saving(folder):
    """True while a checkpoint is being written (its step_N.tmp folder exists)."""
    try:
        return any(name.endswith(".tmp") for name in os.listdir(os.path.join(folder, "run", "checkpoints")))
    except OSError:
        return False


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the run folders")
    parser.add_argument("--async", dest="background", action="store_true",
                        help="the killed run saves its checkpoints in the background (checkpoint.async)")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    tmp = tempfile.mkdtemp(prefix="ft_soak_")
    print(f"soak: {args.minutes} min, seed {seed}, folders under {tmp}", flush=True)
    try:
        # How fast is an uninterrupted run here? Then as many steps as it does in half the time.
        calibration = run_once(args.build, os.path.join(tmp, "calibration"), 40)
        steps = max(40, int(40 / calibration * args.minutes * 60 / 2))
        reference_s = run_once(args.build, os.path.join(tmp, "reference"), steps)
        print(f"soak: {steps} steps, uninterrupted {reference_s:.1f} s", flush=True)

        folder = os.path.join(tmp, "killed")
        config = write_config(folder, steps, args.background)
        log_path = os.path.join(folder, "output.log")
        start = time.monotonic()
        with open(log_path, "w") as log:
            launcher = subprocess.Popen(launch_command(args.build, config, max_restarts=100000), stdout=log,
                                        stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS="1"))
        kills = kills_in_save = 0
        deadline = start + args.minutes * 60
        while launcher.poll() is None and time.monotonic() < deadline:
            time.sleep(rng.uniform(1.0, 6.0))
            ranks = children(launcher.pid)
            if not ranks or launcher.poll() is not None:
                continue
            in_save = saving(folder)
            try:
                os.kill(rng.choice(ranks), signal.SIGKILL)
            except ProcessLookupError:
                continue
            kills += 1
            kills_in_save += in_save
        code = launcher.wait()
        killed_s = time.monotonic() - start
        with open(log_path, errors="replace") as f:
            lines = f.read().splitlines()
        restarts = sum("restarting all ranks" in line for line in lines)
        # Rank 0 prints every step it finishes ("[rank 0] step 12/444 | loss ..."), also one it
        # finishes again after a restart: the count beyond the run's steps is the work redone.
        progress = sum(bool(re.match(r"\[rank 0\] step \d+/\d+ ", line)) for line in lines)
        if code != 0:
            sys.exit(f"soak: the killed run failed ({code}) after {kills} kills: see {log_path}")

        expected = step_losses(os.path.join(tmp, "reference"))
        got = step_losses(folder)
        same_losses = got == expected
        same_adapter = adapter_bytes(folder) == adapter_bytes(os.path.join(tmp, "reference"))
        print(f"soak: {kills} kills ({kills_in_save} during a checkpoint save), {restarts} restarts, "
              f"{progress - steps} steps redone, {killed_s:.1f} s against {reference_s:.1f} s uninterrupted "
              f"({killed_s - reference_s:.1f} s lost)")
        print(f"soak: losses of all {len(expected)} steps {'equal' if same_losses else 'DIFFER'}, "
              f"adapter {'bit-identical' if same_adapter else 'DIFFERS'}")
        if not (same_losses and same_adapter):
            diff = [s for s in expected if got.get(s) != expected[s]][:5]
            sys.exit(f"soak: FAILED (seed {seed}); first differing steps {diff}; folders kept under {tmp}")
        if kills == 0:
            sys.exit("soak: FAILED: no rank was killed (the run ended too soon)")
    except BaseException:
        args.keep = True
        raise
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
