#!/usr/bin/env python3
"""ft_train against the same training step in eager PyTorch (bench/eager_llama.py) on the same
LibTorch: a random ~60M LLaMA with the LLaMA-2 vocabulary, micro-batch 4 x 256 tokens of the same
text, LoRA (q_proj, v_proj, r 8) and full fine-tuning, one and two threads. Prints tokens/s of
each and the ratio ft / PyTorch, and the first step's loss of both (equal: the same computation).
A shared VM's speed drifts by tens of percent from minute to minute: each case runs the two sides
alternately --repeats times and keeps each side's best run (the median step of a run).
Run it with the Python whose torch is the build's LibTorch:
    /usr/bin/python3 bench/bench_vs_pytorch.py                      # Debian's torch 1.13, build/
    .venv/bin/python bench/bench_vs_pytorch.py --build build-pip    # the pip torch 2.x, build-pip/
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import same_blas_kernels  # noqa: E402

same_blas_kernels.restart_with_ft_blas_kernels(same_blas_kernels.build_from_argv())
import torch  # noqa: E402

import eager_llama  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCH, SEQ, LORA = 4, 256, (8, 16, ("q_proj", "v_proj"))


def make_texts(path, count):
    """Records of one long text each (alpaca records joined), all longer than SEQ tokens."""
    records = json.load(open(os.path.join(ROOT, "tests/data/datasets/alpaca_train.json")))
    pieces = [" ".join(filter(None, (r["instruction"], r.get("input", ""), r["output"]))) for r in records]
    texts, current = [], ""
    for p in pieces * 4:
        current += p + "\n"
        if len(current) > 4 * SEQ * 5:
            texts.append(current)
            current = ""
        if len(texts) == count:
            break
    with open(path, "w") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    return texts


def ft_run(build, model, data, mode, threads, steps, workdir):
    run_dir = tempfile.mkdtemp(dir=workdir, prefix=f"run-{mode}-{threads}-")
    os.rmdir(run_dir)
    config = {
        "run_dir": run_dir,
        "model": {"path": model},
        "data": {"train": data, "format": "text", "max_seq_len": SEQ, "shuffle": False},
        "train": {"global_batch_size": BATCH, "micro_batch_size": BATCH, "max_steps": steps, "lr": 1e-4,
                  "threads": threads},
        "checkpoint": {"save_at_end": False},
        "log": {"every_steps": 1},
    }
    if mode == "lora":
        config["lora"] = {"r": LORA[0], "alpha": LORA[1], "dropout": 0.0, "target_modules": list(LORA[2])}
    path = os.path.join(workdir, f"config-{mode}-{threads}.json")
    json.dump(config, open(path, "w"))
    r = subprocess.run([os.path.join(build, "bin/ft_train"), path], capture_output=True, text=True,
                       env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    if r.returncode != 0:
        sys.exit(f"bench_vs_pytorch: ft_train failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    lines = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    steps_ = [l for l in lines if "loss" in l]
    timed = [s["time"]["step"] for s in steps_[2:]]  # the first steps pay for warm-up
    return {"tokens_per_s": BATCH * SEQ / statistics.median(timed), "first_loss": steps_[0]["loss"]}


def torch_run(model_dir, batches, mode, threads, steps):
    eager_llama.set_threads(threads)
    torch.manual_seed(0)
    model = eager_llama.EagerLlama(model_dir, LORA if mode == "lora" else (0, 0, ()))
    optimizer = eager_llama.make_optimizer(model, 1e-4)
    times, first = [], None
    for i in range(steps):
        ids = batches[i % len(batches)]
        start = time.perf_counter()
        loss = eager_llama.train_step(model, optimizer, ids, ids)
        times.append(time.perf_counter() - start)
        first = loss if first is None else first
    return {"tokens_per_s": BATCH * SEQ / statistics.median(times[2:]), "first_loss": first}


def token_batches(tokenizer_model, texts, count):
    import sentencepiece
    sp = sentencepiece.SentencePieceProcessor(model_file=tokenizer_model)
    rows = [[sp.bos_id()] + sp.encode(t)[: SEQ - 1] for t in texts]
    assert all(len(r) == SEQ for r in rows), "a text shorter than SEQ tokens"
    return [torch.tensor(rows[i * BATCH:(i + 1) * BATCH]) for i in range(count)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--steps", type=int, default=6, help="optimizer steps per run (the first two are not timed)")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--modes", default="lora,full")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each side per case, alternating; best kept")
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    cache = open(os.path.join(build, "CMakeCache.txt")).read()
    print(f"PyTorch {torch.__version__} ({torch.__file__}); ft build {build}"
          f" ({'pip LibTorch' if 'site-packages/torch' in cache else 'Debian LibTorch'});"
          f" OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')} for both")
    with tempfile.TemporaryDirectory() as work:
        model = os.path.join(work, "model")
        subprocess.run([os.path.join(build, "bin/make_random_model"), "--out", model, "--hidden", "640", "--layers",
                        str(args.layers), "--heads", "10", "--intermediate", "1728", "--tokenizer-from",
                        os.path.join(ROOT, "tests/data/llama2-tokenizer")], check=True, capture_output=True)
        data = os.path.join(work, "texts.jsonl")
        texts = make_texts(data, BATCH * args.steps)
        batches = token_batches(os.path.join(model, "tokenizer.model"), texts, args.steps)
        params = sum(t.numel() for t in eager_llama.load_safetensors(os.path.join(model, "model.safetensors")).values())
        print(f"model: {params / 1e6:.1f}M parameters, vocab 32000; micro-batch {BATCH} x {SEQ} tokens; "
              f"{args.steps} steps per run, median of steps 3..{args.steps}")
        print(f"{'case':<10} {'threads':>7} {'PyTorch tok/s':>14} {'ft tok/s':>10} {'ft/PyTorch':>11}  first loss (PyTorch, ft)")
        for mode in args.modes.split(","):
            for threads in (int(t) for t in args.threads.split(",")):
                refs, fts = [], []
                for _ in range(args.repeats):
                    refs.append(torch_run(model, batches, mode, threads, args.steps))
                    fts.append(ft_run(build, model, data, mode, threads, args.steps, work))
                ref = max(refs, key=lambda r: r["tokens_per_s"])
                ft = max(fts, key=lambda r: r["tokens_per_s"])
                print(f"{mode:<10} {threads:>7} {ref['tokens_per_s']:>14.1f} {ft['tokens_per_s']:>10.1f} "
                      f"{ft['tokens_per_s'] / ref['tokens_per_s']:>10.2f}x  {ref['first_loss']:.5f}, {ft['first_loss']:.5f}",
                      flush=True)


if __name__ == "__main__":
    main()
