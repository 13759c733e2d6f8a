"""The `tokenizers` library on the texts bench_tokenizer encodes (every non-empty instruction, input
and output of the alpaca file), one thread, one text per call, for the speed comparison in
docs/benchmarks.md. Same options and defaults as bench_tokenizer's --tokenizer/--data/--reps, but
--tokenizer names a tokenizer.json.
Usage: .venv/bin/python bench/bench_tokenizers_reference.py [--tokenizer F] [--data F] [--reps N]"""
import argparse
import json
import os
import time

os.environ["RAYON_NUM_THREADS"] = "1"  # before tokenizers starts its pool
from tokenizers import Tokenizer  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--tokenizer", default="tests/data/llama3-tokenizer/tokenizer.json")
parser.add_argument("--data", default="tests/data/datasets/alpaca_en_demo.json")
parser.add_argument("--reps", type=int, default=5)
args = parser.parse_args()

tokenizer = Tokenizer.from_file(args.tokenizer)
with open(args.data) as f:
    texts = [r[k] for r in json.load(f) for k in ("instruction", "input", "output") if r.get(k)]
tokens = 0
start = time.perf_counter()
for _ in range(args.reps):
    for text in texts:
        tokens += len(tokenizer.encode(text, add_special_tokens=False).ids)
seconds = time.perf_counter() - start
print(f"{len(texts)} texts, {tokens // args.reps} tokens per pass, {args.reps} passes")
print(f"encode, 1 thread: {tokens / seconds:12.0f} tokens/s")
