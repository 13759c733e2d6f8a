#!/usr/bin/env python3
"""The byte-level BPE references, made with Hugging Face `tokenizers` (the pinned pip version):

1. tests/data/qwen2-tokenizer-tiny/: a small Qwen2-style tokenizer.json trained on the bundled
   datasets (Qwen2's NFC normalizer, its exact split regex, ByteLevel, BPE merges saved as pairs,
   the special tokens <|endoftext|>, <|im_start|>, <|im_end|> after the vocabulary) and a
   tokenizer_config.json as Qwen2.5-Instruct's (eos_token <|im_end|>, bos_token null).
2. tests/data/bpe_tokenizer_reference.json: ids of edge-case strings for it and for
   tests/data/llama3-tokenizer, with special tokens encoded as text (ft never splits text at
   them), plus decodes, special ids and vocabulary sizes; read by tests/data/bpe_tokenizer_test.cpp.
  .venv/bin/python3 tests/reference/make_bpe_tokenizer.py
"""
import json
import os

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = os.path.join(ROOT, "tests", "data")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def corpus():
    folder = os.path.join(DATA, "datasets")
    out = []

    def walk(v):
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)

    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            text = f.read()
        if name.endswith(".jsonl"):
            for line in text.splitlines():
                if line.strip():
                    walk(json.loads(line))
        else:
            walk(json.loads(text))
    return out


def make_qwen2_tiny():
    tok = Tokenizer(models.BPE(ignore_merges=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False, trim_offsets=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, use_regex=False, trim_offsets=False)
    from tokenizers import processors
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, use_regex=False, trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=1500, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(corpus(), trainer=trainer)
    tok.add_special_tokens(SPECIALS)
    out = os.path.join(DATA, "qwen2-tokenizer-tiny")
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))  # tokenizers >= 0.20 saves merges as pairs
    added = {str(tok.token_to_id(s)): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                                       "single_word": False, "special": True} for s in SPECIALS}
    config = {"add_prefix_space": False, "added_tokens_decoder": added, "additional_special_tokens": SPECIALS[1:],
              "bos_token": None, "chat_template": None, "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>",
              "errors": "replace", "model_max_length": 32768, "pad_token": "<|endoftext|>", "split_special_tokens": False,
              "tokenizer_class": "Qwen2Tokenizer", "unk_token": None}
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


EDGE = [
    "Hello world", "Once upon a time, there was a llama.", "  leading spaces", "trailing spaces   ", "a  b   c",
    "I'm you're we've they'll she'd it's don't", "I'M YOU'RE WE'VE THEY'LL SHE'D IT'S DON'T", "'S 'T 'Re 'vE 'm 'Ll 'D",
    "x'sy 'ſ 'ſx", "1 12 123 1234 12345 1234567", "3.14159 -42 1,000,000", "٣٤٥ ١٢٣٤ Ⅻ ½ ²",
    "日本語のテキスト。中文字符，한국어", "e\u0301 \u00e9 A\u030a \u212b \u1100\u1161\u11a8 \uac00\u11a8 q\u0307\u0323",
    "\u1e0b\u0323 \u0387 \u2126 \u0344 \uf900", "😀👍🏽👨‍👩‍👧‍👦 🦙🦙", "tab\there\nnewline\r\nCRLF\n\n\nend",
    "  \n  \n\t\n x", "\u00a0\u3000 \u2003x\u2028y", "<|eot_id|> literal <|begin_of_text|>", "<|im_start|>user\nhi<|im_end|>",
    "<|endoftext|>", "!!!??? ...\n\n", "$hello #world @user", "a" * 3000, " " * 500, "\n" * 300, "0" * 100,
    "ab" * 200, "中" * 200, "snake_case CamelCase kebab-case", "http://example.com/path?q=1&r=2", "", " ", "\n",
]


def write_reference():
    ref = {}
    for name, folder in [("llama3", "llama3-tokenizer"), ("qwen2_tiny", "qwen2-tokenizer-tiny")]:
        tok = Tokenizer.from_file(os.path.join(DATA, folder, "tokenizer.json"))
        tok.encode_special_tokens = True  # special-token text stays text, as in ft
        entries = []
        for text in EDGE:
            ids = tok.encode(text, add_special_tokens=False).ids
            entries.append({"text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=True)})
        specials = {s: tok.token_to_id(s) for s in ["<|begin_of_text|>", "<|eot_id|>", "<|end_of_text|>", *SPECIALS]}
        with_bos = tok.encode("Hi", add_special_tokens=True).ids
        ref[name] = {"folder": folder, "vocab_size": max(tok.get_vocab(with_added_tokens=True).values()) + 1,
                     "special_ids": {k: (-1 if v is None else v) for k, v in specials.items()},
                     "encode_hi_with_specials": with_bos, "encodings": entries}
    with open(os.path.join(DATA, "bpe_tokenizer_reference.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    make_qwen2_tiny()
    write_reference()
