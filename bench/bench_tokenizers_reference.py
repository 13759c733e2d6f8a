"""The `tokenizers` library encoding the same texts bench_tokenizer encodes (alpaca_en_demo.json:
instruction, input and output, 5 passes), one thread, one text per call, for the speed comparison in
docs/data.md. Usage: RAYON_NUM_THREADS=1 .venv/bin/python bench/bench_tokenizers_reference.py"""
import json, time, glob, os
os.environ["RAYON_NUM_THREADS"]="1"
from tokenizers import Tokenizer
tok = Tokenizer.from_file("tests/data/llama3-tokenizer/tokenizer.json")
texts=[]
for f in ["tests/data/datasets/alpaca_en_demo.json"]:
    try: recs=json.load(open(f))
    except Exception: continue
    if not isinstance(recs,list): continue
    for r in recs:
        if isinstance(r,dict):
            for k in ("instruction","input","output"):
                if isinstance(r.get(k),str) and r[k]: texts.append(r[k])
n=0; t=time.perf_counter()
for _ in range(5):
    for s in texts: n+=len(tok.encode(s, add_special_tokens=False).ids)
dt=time.perf_counter()-t
print(len(texts),"texts", n//5, "tokens/pass", f"{n/dt:.0f} tokens/s one thread (encode one by one)")
