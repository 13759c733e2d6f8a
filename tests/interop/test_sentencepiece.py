"""The real sentencepiece library (pinned pip version) and ft's tokenizer (build/bin/ft_tokenize)
agree id for id, and on decoding, for every committed tokenizer model:

  stories260K/tokenizer.model, llama2-tokenizer/tokenizer.model and tokenizer-tiny/bpe-{user,
  suffix,unused}.model (tokenizer-tiny/unigram.model is a unigram model, which ft refuses: tested)

on every committed corpus (every string of tests/data/datasets/*, which holds the alpaca records
tests/reference/make_tokenizer_reference.py encodes, and that script's own edge cases, seeded
random strings and byte strings), on generated hostile strings (seeded: invalid UTF-8, long runs of
one character, whitespace runs, samples of every Unicode general category, emoji and CJK, literal
"<s>" / "</s>" / "<unk>" text, the empty string), and on decoding every single id and seeded
random id sequences.

Invalid UTF-8 (lib/data/tokenizer.h, lib/data/tokenizer.cpp): ft takes bytes as sentencepiece
does, each byte that does not start a well-formed character becomes U+FFFD. That is not Python's
errors="replace" (one U+FFFD per maximal ill-formed subsequence: b"\\xe2\\x82" gives one, not two):
the test checks ft against sentencepiece on the raw bytes, and sentencepiece against that rule.
"""
import codecs
import importlib.util
import json
import os
import random
import unicodedata
import unittest

import sentencepiece as spm

import interop_common as ic

MODELS = {
    "stories260K": "stories260K/tokenizer.model",
    "llama2": "llama2-tokenizer/tokenizer.model",
    "bpe-user": "tokenizer-tiny/bpe-user.model",
    "bpe-suffix": "tokenizer-tiny/bpe-suffix.model",
    "bpe-unused": "tokenizer-tiny/bpe-unused.model",
}
SEED = 20240611


def _per_byte_replace(error):
    """sentencepiece's rule: U+FFFD for the one byte where decoding fails, then go on."""
    return "\ufffd", error.start + 1


codecs.register_error("ft_interop_per_byte", _per_byte_replace)


def load_reference_script():
    path = os.path.join(ic.ROOT, "tests", "reference", "make_tokenizer_reference.py")
    spec = importlib.util.spec_from_file_location("make_tokenizer_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def corpus_strings():
    """Every string in every committed dataset file (JSON or JSON Lines), in file order, once."""
    folder = os.path.join(ic.DATA, "datasets")
    out, seen = [], set()

    def walk(value):
        if isinstance(value, str):
            if value not in seen:
                seen.add(value)
                out.append(value)
        elif isinstance(value, list):
            for v in value:
                walk(v)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)

    files = sorted(os.listdir(folder))
    for name in files:
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            text = f.read()
        if name.endswith(".jsonl"):
            for line in text.splitlines():
                if line.strip():
                    walk(json.loads(line))
        else:
            walk(json.loads(text))
    return files, out


WHITESPACE = [" ", "\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\u00a0", "\u1680",
              "\u180e", *[chr(c) for c in range(0x2000, 0x200b)], "\u200b", "\u2028", "\u2029", "\u202f", "\u205f",
              "\u3000", "\ufeff"]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "🇺🇳", "1️⃣", "#️⃣", "🦙", "🧑🏿‍🚀", "❤️", "❤\ufe0e", "\U0001FAE0", "🫠",
         "©", "™", "🀄", "🃏", "\U0001F9D1\u200d\U0001F4BB"]
CJK = ["日本語", "中文字符", "한국어", "ｶﾀｶﾅ", "ひらがな", "カタカナ", "\u3400", "\u4dbf", "\U00020000", "\U0002A6DF",
       "\U00030000", "〇", "々", "。、「」", "\uff01\uff1f", "丂丄丅", "\u2e80", "\u31c0", "\uf900"]
WORDS = ["the", "Once", "upon", "a", "time", "llama", "hello", "world", "x", "1234", "?", "naïve", "Straße"]


def unicode_category_samples(rng):
    """Per general category (all 30, Cn and Cs included), seeded samples plus its first and last
    code point, alone, between letters and between spaces; surrogates (Cs) as bytes (CESU-8, not
    UTF-8: they cannot be UTF-8)."""
    by_category = {}
    for cp in range(0x110000):
        by_category.setdefault(unicodedata.category(chr(cp)), []).append(cp)
    texts, raw = [], []
    for category in sorted(by_category):
        cps = by_category[category]
        picks = sorted(set(rng.sample(cps, min(10, len(cps))) + [cps[0], cps[-1]]))
        for cp in picks:
            for s in (chr(cp), f"a{chr(cp)}b", f" {chr(cp)} ", chr(cp) * 3):
                if category == "Cs":
                    raw.append(s.encode("utf-8", "surrogatepass"))
                else:
                    texts.append(s)
        if category != "Cs":
            texts.append("".join(chr(cp) for cp in picks))
    return sorted(by_category), texts, raw


def hostile_strings(rng):
    """(texts, byte strings): the generated hostile inputs."""
    texts = ["", "<s>", "</s>", "<unk>", "<pad>", "<s></s><unk>", " <s> ", "<s>hello</s>", "hello <unk> world",
             "<<s>>", "</s></s>", "<0x00>", "<0x41>", "<0xFF>", "▁<s>", "<s>▁</s>", "[INST] <<SYS>>\n<</SYS>>\n\n[/INST]",
             "<|endoftext|>", "<|im_start|>user", "\x00", "\x00\x00\x00", "a\x00b", "\x7f", "\x01\x02\x03\x1b[31m"]
    for ch in ["a", " ", "\n", "\t", "\r\n", "é", "中", "🦙", "\u2581", "0", ".", "-", "\u00a0", "\u3000", "\ufffd",
               "<s>", "e\u0301", "👍🏽", "\x00"]:
        for n in (2, 257, 4097):
            texts.append(ch * n)
    texts.append("a" * 20000)
    for _ in range(60):
        texts.append("".join(rng.choice(WHITESPACE) for _ in range(rng.randint(1, 40))))
    for _ in range(60):
        parts = []
        for _ in range(rng.randint(1, 8)):
            parts.append(rng.choice(WORDS))
            parts.append("".join(rng.choice(WHITESPACE) for _ in range(rng.randint(0, 6))))
        texts.append("".join(parts))
    texts += EMOJI + CJK + ["".join(EMOJI), "".join(CJK)]
    pool = EMOJI + CJK + WORDS + [" ", "  ", "\n"]
    for _ in range(80):
        texts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 16))))

    raw = [b"\xff", b"\xfe\xff", b"\xff\xfe", b"\x80", b"\xbf\xbf", b"\xc0\xaf", b"\xc1\xbf", b"\xe0\x80\xaf",
           b"\xe0\x9f\xbf", b"\xf0\x80\x80\xaf", b"\xf0\x8f\xbf\xbf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
           b"\xed\xa0\xbd\xed\xb8\x80", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xf7\xbf\xbf\xbf", b"\xe4\xb8",
           b"\xf0\x9f\x98", b"a\xc3", b"\xc3 a", b"\xf8\x88\x80\x80\x80", b"\xfc\x84\x80\x80\x80\x80",
           b"\xe2\x96\x81\xe2\x96", b"\xe2\x96\x81\x81", b" \x80 \x80 ", b"\xc3\xa9\xa9", b"\xef\xbb\xbf\xff",
           b"<s>\xff</s>", b"\xff" * 300, b"\x80" * 300, b"hello \xf0\x9f\xa6\x99\xf0\x9f\xa6 world"]
    fragments = [b"\xc3", b"\xa9", b"\xe4\xb8", b"\xad", b"\xf0\x9f", b"\xa6\x99", b"\x80", b"\xbf", b"\xff", b"\xfe",
                 b"\xc0", b"\xed", b"\xa0", b"a", b" ", b"\n", "é".encode(), "🦙".encode(), "中".encode()]
    for _ in range(150):
        if rng.random() < 0.5:
            b = bytes(rng.randrange(256) for _ in range(rng.randint(1, 24)))
        else:
            b = b"".join(rng.choice(fragments) for _ in range(rng.randint(1, 12)))
        raw.append(b)
    return texts, raw


def ft_tokenize(workdir, model_path, items):
    """ft's [(ids, decoded bytes)] for items (str, bytes, or {"ids": [...]})."""
    encoded = []
    for item in items:
        if isinstance(item, bytes):
            encoded.append({"hex": item.hex()})
        else:
            encoded.append(item)
    texts_path = os.path.join(workdir, "texts.json")
    out_path = os.path.join(workdir, "ids.json")
    ic.write_json(texts_path, encoded)
    ic.run_ft("ft_tokenize", ["--tokenizer", model_path, "--texts", texts_path, "--out", out_path])
    out = ic.read_json(out_path)
    decoded = [bytes.fromhex(d["hex"]) if isinstance(d, dict) else d.encode("utf-8") for d in out["decoded"]]
    return list(zip(out["ids"], decoded))


def shown(item, limit=80):
    r = repr(item)
    return r if len(r) <= limit else r[:limit] + f"... ({len(item)} long)"


class SentencePiece(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.dir = ic.class_temp_dir(cls, "spm")
        cls.reference = load_reference_script()
        cls.files, cls.corpus = corpus_strings()
        rng = random.Random(SEED)
        cls.categories, cat_texts, cat_raw = unicode_category_samples(rng)
        hostile_texts, hostile_raw = hostile_strings(rng)
        cls.hostile_texts = cat_texts + hostile_texts
        cls.hostile_raw = cat_raw + hostile_raw
        print(f"corpus: {len(cls.corpus)} strings from {', '.join(cls.files)}; hostile: {len(cls.hostile_texts)} "
              f"texts ({len(cls.categories)} Unicode categories sampled), {len(cls.hostile_raw)} byte strings; "
              f"sentencepiece {spm.__version__}", flush=True)

    def check_model(self, name):
        path = os.path.join(ic.DATA, MODELS[name])
        sp = spm.SentencePieceProcessor(model_file=path)
        self.assertEqual(sp.vocab_size() > 0, True)
        ref = self.reference
        script_rng = random.Random(len(name))  # the reference script's own cases, with a seed of ours
        script_texts = ref.edge_cases() + ref.random_texts(script_rng, 300)
        script_raw = ref.byte_cases(script_rng)
        groups = {
            "corpus": self.corpus,
            "reference script edge cases and random strings": script_texts,
            "hostile texts": self.hostile_texts,
            "reference script byte strings": script_raw,
            "hostile byte strings (mostly invalid UTF-8)": self.hostile_raw,
        }
        decode_rng = random.Random(SEED + len(name))
        decode_items = [{"ids": [i]} for i in range(sp.vocab_size())]
        decode_items += [{"ids": c["ids"]} for c in ref.decode_cases(sp, decode_rng, 300)]
        decode_items += [{"ids": [decode_rng.randrange(sp.vocab_size()) for _ in range(decode_rng.randint(0, 30))]}
                         for _ in range(300)]
        groups["decode: every id, and id sequences"] = decode_items

        items = [item for group in groups.values() for item in group]
        got = ft_tokenize(self.dir.path, path, items)
        self.assertEqual(len(got), len(items))
        failures = []
        position = 0
        for group, group_items in groups.items():
            mismatched_ids = mismatched_text = 0
            for item in group_items:
                ft_ids, ft_decoded = got[position]
                position += 1
                if isinstance(item, dict):
                    want_ids = item["ids"]
                else:
                    want_ids = sp.encode(item)
                want_decoded = sp.decode(want_ids, out_type=bytes)
                if ft_ids != want_ids:
                    mismatched_ids += 1
                    failures.append(f"{group}: {shown(item)}: ft {ft_ids[:20]} sentencepiece {want_ids[:20]}")
                elif ft_decoded != want_decoded:
                    mismatched_text += 1
                    failures.append(f"{group}: {shown(item)}: decoded ft {shown(ft_decoded)} "
                                    f"sentencepiece {shown(want_decoded)}")
            print(f"{name}: {group}: {len(group_items)} cases, {mismatched_ids} id mismatches, "
                  f"{mismatched_text} decode mismatches", flush=True)
        self.assertFalse(failures, f"{name}: {len(failures)} cases where ft and sentencepiece differ:\n" +
                         "\n".join(failures[:15]))

        # Invalid UTF-8: sentencepiece (and so ft) replaces byte by byte, unlike Python's "replace".
        raw = script_raw + self.hostile_raw
        invalid = [b for b in raw if not _is_utf8(b)]
        self.assertGreater(len(invalid), 100)
        per_byte = [b for b in invalid if sp.encode(b) != sp.encode(b.decode("utf-8", "ft_interop_per_byte"))]
        python_replace = sum(sp.encode(b) != sp.encode(b.decode("utf-8", "replace")) for b in invalid)
        print(f"{name}: {len(invalid)} invalid UTF-8 byte strings; sentencepiece's ids equal those of the text "
              f"with one U+FFFD per bad byte for {len(invalid) - len(per_byte)}, of Python's errors='replace' "
              f"for {len(invalid) - python_replace}", flush=True)
        self.assertFalse(per_byte, f"{name}: sentencepiece does not replace bad bytes one by one for "
                                   f"{[shown(b) for b in per_byte[:5]]}")

    def test_stories260k(self):
        self.check_model("stories260K")

    def test_llama2(self):
        self.check_model("llama2")

    def test_tiny_bpe_user_symbols(self):
        self.check_model("bpe-user")

    def test_tiny_bpe_whitespace_suffix(self):
        self.check_model("bpe-suffix")

    def test_tiny_bpe_unused_pieces(self):
        self.check_model("bpe-unused")

    def test_every_committed_model_covered(self):
        committed = {os.path.relpath(os.path.join(dirpath, f), ic.DATA)
                     for dirpath, _, files in os.walk(ic.DATA) for f in files if f.endswith(".model")}
        self.assertEqual(committed, set(MODELS.values()) | {"tokenizer-tiny/unigram.model"},
                         "a tokenizer model was added or removed: list it in MODELS")

    def test_unigram_model_refused(self):
        path = os.path.join(ic.DATA, "tokenizer-tiny", "unigram.model")
        sp = spm.SentencePieceProcessor(model_file=path)
        self.assertTrue(sp.encode("hello world"))  # a valid model for sentencepiece
        texts = ic.write_json(self.dir.file("unigram_texts.json"), ["hello world"])
        result = ic.run_ft("ft_tokenize", ["--tokenizer", path, "--texts", texts, "--out", self.dir.file("u.json")],
                           expect_ok=False)
        print(f"unigram.model: exit {result.returncode}: {result.stderr.strip()}", flush=True)
        self.assertEqual(result.returncode, 1)
        self.assertIn("unigram", result.stderr.replace(path, "MODEL"))


def _is_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


if __name__ == "__main__":
    unittest.main()
