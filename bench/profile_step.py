#!/usr/bin/env python3
"""Where the time of one training step goes, per operator: ft's forward + backward
(bench_forward_backward --profile, LibTorch's profiler) and, with --eager, the same step in eager
PyTorch (bench/eager_llama.py under torch.autograd.profiler). Self time per operator (its own
time, without the operators it called), summed over the step, largest first.
    /usr/bin/python3 bench/profile_step.py --build build --threads 1 --lora-r 8 --eager
    /usr/bin/python3 bench/profile_step.py --build build --threads 1            # full fine-tuning
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import same_blas_kernels  # noqa: E402

same_blas_kernels.restart_with_ft_blas_kernels(same_blas_kernels.build_from_argv())
SHAPE = dict(layers=8, hidden=640, heads=10, intermediate=1728, vocab=32000, batch=4, seq=256)


def self_times(events):
    """Self time (us) per name from complete events ("X") of one thread: duration minus children."""
    by_thread = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X":
            by_thread[e.get("tid")].append(e)
    totals, counts = collections.Counter(), collections.Counter()
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []  # [event, children time]
        for e in evs:
            while stack and e["ts"] >= stack[-1][0]["ts"] + stack[-1][0]["dur"]:
                done, child = stack.pop()
                totals[done["name"]] += done["dur"] - child
                counts[done["name"]] += 1
            if stack:
                stack[-1][1] += e["dur"]
            stack.append([e, 0.0])
        while stack:
            done, child = stack.pop()
            totals[done["name"]] += done["dur"] - child
            counts[done["name"]] += 1
            if stack:
                pass
    return totals, counts


def print_table(title, totals, counts, top):
    total = sum(totals.values())
    print(f"\n{title}: {total / 1e3:.1f} ms of operator time")
    print(f"{'operator':<48} {'calls':>6} {'ms':>9} {'share':>7}")
    for name, us in totals.most_common(top):
        print(f"{name[:48]:<48} {counts[name]:>6} {us / 1e3:>9.1f} {100 * us / total:>6.1f}%")


def ft_profile(build, threads, lora_r, loss_chunk, work):
    trace = os.path.join(work, "ft.json")
    cmd = [os.path.join(build, "bin/bench_forward_backward"), "--threads", str(threads), "--steps", "1",
           "--kv-heads", str(SHAPE["heads"]), "--profile", trace, "--loss-chunk", str(loss_chunk),
           "--lora-r", str(lora_r)]
    for k in ("layers", "hidden", "heads", "intermediate", "vocab", "batch", "seq"):
        cmd += [f"--{k}", str(SHAPE[k])]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    print(out.strip())
    data = json.load(open(trace))
    return self_times(data["traceEvents"] if isinstance(data, dict) else data)


def eager_profile(threads, lora_r, work):
    import torch
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import eager_llama
    eager_llama.set_threads(threads)
    model_dir = os.path.join(work, "model")
    subprocess.run([os.path.join(ARGS.build, "bin/make_random_model"), "--out", model_dir, "--hidden",
                    str(SHAPE["hidden"]), "--layers", str(SHAPE["layers"]), "--heads", str(SHAPE["heads"]),
                    "--intermediate", str(SHAPE["intermediate"]), "--tokenizer-from",
                    os.path.join(ROOT, "tests/data/llama2-tokenizer")], check=True, capture_output=True)
    lora = (lora_r, 2 * lora_r, ("q_proj", "v_proj")) if lora_r else (0, 0, ())
    model = eager_llama.EagerLlama(model_dir, lora)
    ids = torch.randint(0, SHAPE["vocab"], (SHAPE["batch"], SHAPE["seq"]))

    def step():
        logits = model(ids)
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                                                 ids[:, 1:].reshape(-1), reduction="sum") / ids[:, 1:].numel()
        loss.backward()
        model.zero_grad(set_to_none=True)

    step()
    with torch.autograd.profiler.profile() as prof:
        step()
    trace = os.path.join(work, "eager.json")
    prof.export_chrome_trace(trace)
    data = json.load(open(trace))
    return self_times(data["traceEvents"] if isinstance(data, dict) else data)


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lora-r", type=int, default=0, help="LoRA rank on q_proj, v_proj; 0 = full fine-tuning")
    parser.add_argument("--loss-chunk", type=int, default=1024, help="ft's train.loss_chunk_tokens")
    parser.add_argument("--eager", action="store_true", help="also profile the step in eager PyTorch")
    parser.add_argument("--top", type=int, default=25)
    ARGS = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        print_table("ft forward+backward", *ft_profile(ARGS.build, ARGS.threads, ARGS.lora_r, ARGS.loss_chunk, work),
                    ARGS.top)
        if ARGS.eager:
            print_table("eager PyTorch forward+backward", *eager_profile(ARGS.threads, ARGS.lora_r, work), ARGS.top)


if __name__ == "__main__":
    main()
