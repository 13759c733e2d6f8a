#!/usr/bin/env python3
"""Splits the bundled alpaca demo set (tests/data/datasets/alpaca_en_demo.json, 999 records) into
a training part (the first 899 records, a JSON array) and a held-out evaluation part (the last
100, as JSON Lines, so both input layouts are exercised). Deterministic; run from the repo root:
    /usr/bin/python3 tests/reference/split_alpaca.py
"""
import json

records = json.load(open("tests/data/datasets/alpaca_en_demo.json", encoding="utf-8"))
assert len(records) == 999
with open("tests/data/datasets/alpaca_train.json", "w", encoding="utf-8") as f:
    json.dump(records[:899], f, ensure_ascii=False, indent=1)
    f.write("\n")
with open("tests/data/datasets/alpaca_eval.jsonl", "w", encoding="utf-8") as f:
    for r in records[899:]:
        f.write(json.dumps(r, ensure_ascii=False) + "\n")

# The same real records in the other input formats (first 50 each), for the format tests.
def prompt_of(r):
    return r["instruction"] + ("\n" + r["input"] if r["input"] else "")

with open("tests/data/datasets/alpaca_chat.jsonl", "w", encoding="utf-8") as f:
    for i, r in enumerate(records[:50]):
        messages = [{"role": "user", "content": prompt_of(r)}, {"role": "assistant", "content": r["output"]}]
        if i % 5 == 0:  # some conversations carry a system message
            messages.insert(0, {"role": "system", "content": "You are a helpful assistant."})
        f.write(json.dumps({"messages": messages}, ensure_ascii=False) + "\n")
with open("tests/data/datasets/alpaca_prompt_completion.jsonl", "w", encoding="utf-8") as f:
    for r in records[:50]:
        f.write(json.dumps({"prompt": prompt_of(r) + "\n", "completion": r["output"]}, ensure_ascii=False) + "\n")
with open("tests/data/datasets/alpaca_text.json", "w", encoding="utf-8") as f:
    json.dump([{"text": r["output"]} for r in records[:50]], f, ensure_ascii=False, indent=1)
    f.write("\n")

# ShareGPT (LLaMA-Factory's / axolotl's form): records 0..49 paired into 25 two-turn
# conversations; every third has a top-level "system", every fifth a system turn of its own.
with open("tests/data/datasets/alpaca_sharegpt.jsonl", "w", encoding="utf-8") as f:
    for i in range(25):
        a, b = records[2 * i], records[2 * i + 1]
        turns = [{"from": "human", "value": prompt_of(a)}, {"from": "gpt", "value": a["output"]},
                 {"from": "human", "value": prompt_of(b)}, {"from": "gpt", "value": b["output"]}]
        record = {"conversations": turns}
        if i % 3 == 0:
            record["system"] = "You are a helpful assistant."
        elif i % 5 == 0:
            turns.insert(0, {"from": "system", "value": "Answer carefully."})
        f.write(json.dumps(record, ensure_ascii=False) + "\n")
