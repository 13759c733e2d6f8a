"""Hugging Face `tokenizers` (pinned pip version) and ft's tokenizer.json reader
(lib/data/bpe_tokenizer.h, through build/bin/ft_tokenize) agree id for id, and on decoding, for

  llama3-tokenizer/tokenizer.json (Llama 3: Split with \\p{N}{1,3}, ignore_merges, "a b" merges) and
  qwen2-tokenizer-tiny/tokenizer.json (Qwen2-style: NFC, single digits, merges as pairs),

on every string of every committed dataset (tests/data/datasets/*), on the edge cases of
tests/reference/make_bpe_tokenizer.py, on generated hostile strings (the sentencepiece suite's:
samples of every Unicode general category, emoji, CJK, whitespace mixes with \\r\\n, \\u00a0,
\\u3000, literal special-token text, runs of one character, seeded random strings), runs of 10,000
of one character, and on decoding every single id and seeded random id sequences.

Special tokens: ft never splits text at them, so `tokenizers` runs with encode_special_tokens =
True (their text encoded as text). Invalid UTF-8: `tokenizers` takes str; ft reads bytes as
String::from_utf8_lossy does, which is Python's errors="replace", so ft on the raw bytes is
compared with `tokenizers` on raw.decode("utf-8", "replace").
"""
import os
import random
import unicodedata
import unittest

from tokenizers import Tokenizer

import interop_common as ic
import test_sentencepiece as sp_suite

MODELS = {"llama3": "llama3-tokenizer", "qwen2_tiny": "qwen2-tokenizer-tiny"}
SEED = 20261205


class Tokenizers(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.dir = ic.class_temp_dir(cls, "tokenizers")
        cls.files, cls.corpus = sp_suite.corpus_strings()
        rng = random.Random(SEED)
        cls.categories, cat_texts, cat_raw = sp_suite.unicode_category_samples(rng)
        hostile_texts, hostile_raw = sp_suite.hostile_strings(rng)
        extra = ["<|eot_id|>", "<|begin_of_text|>hi<|end_of_text|>", "<|im_start|>system\n<|im_end|>\n", "<|endoftext|>",
                 "'S 'LL 'Ve 'ſ x'sY", "1234567890 ١٢٣٤٥٦", "a\r\nb\r\n\r\n c \u00a0\u3000d", "\u00a0" * 7 + "x",
                 " \t \n \r \u3000 ", "ﬁ ﬀ ǅ ǈ Å Å Å", "\u1100\u1161\u11a8\u1100\u1161", "e\u0301\u0327\u0301"]
        runs = [ch * 10000 for ch in ["a", " ", "\n", "1", "中", "🦙", ".", "e\u0301", "\u00a0", "ab"]]
        cls.texts = cat_texts + hostile_texts + extra + runs + [e for e in load_edge_cases()]
        cls.raw = cat_raw + hostile_raw
        print(f"corpus: {len(cls.corpus)} strings from {', '.join(cls.files)}; hostile: {len(cls.texts)} texts "
              f"({len(cls.categories)} Unicode categories sampled), {len(cls.raw)} byte strings", flush=True)

    def check_model(self, name):
        folder = os.path.join(ic.DATA, MODELS[name])
        tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        tok.encode_special_tokens = True
        items = list(self.corpus) + list(self.texts) + list(self.raw)
        refs = [t if isinstance(t, str) else t.decode("utf-8", "replace") for t in items]
        expected = [e.ids for e in tok.encode_batch(refs, add_special_tokens=False)]
        got = sp_suite.ft_tokenize(self.dir.path, folder, items)
        mismatches = []
        for item, want, (ids, decoded) in zip(items, expected, got):
            if ids != want:
                mismatches.append(f"encode {sp_suite.shown(item)}: ft {ids[:20]} tokenizers {want[:20]}")
                continue
            want_text = tok.decode(want, skip_special_tokens=True)
            if decoded != want_text.encode("utf-8"):
                mismatches.append(f"decode {sp_suite.shown(item)}: ft {decoded[:60]!r} tokenizers {want_text[:60]!r}")
        # Decoding every id on its own, and random sequences (special ids among them).
        vocab = tok.get_vocab_size(with_added_tokens=True)
        rng = random.Random(SEED)
        seqs = [[i] for i in range(vocab)] + [[rng.randrange(vocab) for _ in range(rng.randint(1, 30))] for _ in range(2000)]
        got = sp_suite.ft_tokenize(self.dir.path, folder, [{"ids": s} for s in seqs])
        for seq, (_, decoded) in zip(seqs, got):
            want_text = tok.decode(seq, skip_special_tokens=True)
            if decoded != want_text.encode("utf-8"):
                mismatches.append(f"decode ids {seq[:10]}: ft {decoded[:60]!r} tokenizers {want_text[:60]!r}")
        print(f"{name}: {len(items)} texts, {len(seqs)} id sequences, {len(mismatches)} mismatches", flush=True)
        self.assertEqual(mismatches[:20], [], f"{len(mismatches)} mismatches")

    def check_every_code_point(self, name):
        """Every code point but surrogates, each between letters, after a space, before a digit and
        a newline, doubled, decomposed (NFD) and with combining marks: its \\p{L} / \\p{N} / \\s class
        and (Qwen2) its NFC."""
        folder = os.path.join(ic.DATA, MODELS[name])
        tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        tok.encode_special_tokens = True
        cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
        def sample(c):
            ch = chr(c)
            return f"a{ch} {ch}1{ch}\n{ch}{ch}'{ch}x{unicodedata.normalize('NFD', ch)}\u0301{ch}\u0327\u0301"

        texts = ["".join(sample(c) for c in cps[i:i + 256])
                 for i in range(0, len(cps), 256)]
        expected = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
        got = sp_suite.ft_tokenize(self.dir.path, folder, texts)
        bad = [f"code points from U+{cps[i * 256]:04X}" for i, (want, (ids, _)) in enumerate(zip(expected, got)) if ids != want]
        print(f"{name}: {len(cps)} code points in {len(texts)} texts, {len(bad)} mismatching texts", flush=True)
        self.assertEqual(bad[:20], [])

    def test_every_code_point_llama3(self):
        self.check_every_code_point("llama3")

    def test_every_code_point_qwen2_tiny(self):
        self.check_every_code_point("qwen2_tiny")

    def test_llama3(self):
        self.check_model("llama3")

    def test_qwen2_tiny(self):
        self.check_model("qwen2_tiny")


def load_edge_cases():
    import importlib.util
    path = os.path.join(ic.ROOT, "tests", "reference", "make_bpe_tokenizer.py")
    spec = importlib.util.spec_from_file_location("make_bpe_tokenizer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.EDGE


if __name__ == "__main__":
    unittest.main()
