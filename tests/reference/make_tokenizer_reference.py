#!/usr/bin/python3
"""Reference encodings and decodings from the real sentencepiece for ft::data::Tokenizer.

ft reads tokenizer.model itself (libsentencepiece cannot be loaded beside LibTorch), so its
tests compare every encoding below with what sentencepiece produced. Run with Debian's python
(python3-sentencepiece 0.1.97), from the repository root:
    /usr/bin/python3 tests/reference/make_tokenizer_reference.py

Writes into tests/data/:
  tokenizer_reference_tok512.json  stories260K/tokenizer.model (add_dummy_prefix,
                                   remove_extra_whitespaces, byte_fallback)
  tokenizer_reference_llama2.json  llama2-tokenizer/tokenizer.model (add_dummy_prefix,
                                   byte_fallback, spaces kept)
  tokenizer-tiny/*.model           tiny models trained here in memory on alpaca outputs, each
                                   covering options the LLaMA tokenizers do not use:
                                     bpe-user.model    user-defined and control symbols, no
                                                       byte fallback (unknown runs, " ⁇ "), no
                                                       dummy prefix, spaces kept
                                     bpe-suffix.model  treat_whitespace_as_suffix
                                     bpe-unused.model  a third of the merged pieces marked UNUSED
                                                       with set_vocabulary (resegmentation)
                                     unigram.model     a unigram model, which ft refuses
  tokenizer_reference_tiny.json    encodings for the three tiny BPE models

Each reference file holds:
  "alpaca": one line per record of datasets/alpaca_en_demo.json, the ids of
            [instruction, input, output] (texts are read from that file, not repeated);
            "alpaca_decoded" lists only decodings that differ from the text, as
            {"record": i, "field": "output", "decoded": ...}
  "cases":  hand-made edge cases and seeded random strings: {"text" or "hex" (invalid UTF-8
            given as bytes), "ids", "decoded"}
  "decode_cases": seeded random id sequences (byte pieces that form malformed UTF-8, control
            and unknown ids, leading U+2581 pieces) with sentencepiece's decoding
ids never include BOS/EOS (encode(text) with sentencepiece's defaults).
"""
import hashlib
import io
import json
import os
import random
import sys

import sentencepiece as spm

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")
ALPACA = "datasets/alpaca_en_demo.json"
FIELDS = ("instruction", "input", "output")


def edge_cases():
    texts = [
        "", " ", "  ", "   ", "\t", "\n", " \n ", "\r\n", "a", " a", "a ", "  a", "a  ", " a ",
        "  a  b  ", "a  b", "a   b    c", "a\tb", "a\nb", "\n\nfoo\n", "foo\n\n", "\t\tindented",
        "Hello world", "hello   world", "Hello, World! How's it going?",
        "  leading spaces and\ttabs\nnewline", "trailing spaces   ", "   ",
        "Once upon a time", "The quick brown fox jumps over the lazy dog.",
        "数字 12345 and emoji 🦙", "日本語のテキストです。", "中文字符测试", "한국어 텍스트", "Ελληνικά",
        "русский текст", "עברית", "العربية", "हिन्दी", "ไทย",
        "emoji 😀👍🏽👨‍👩‍👧 done", "🦙🦙🦙", "e\u0301 vs \u00e9", "A\u030a \u00c5", "\ufb01 ligature",
        "1234567890", "3.14159265358979", "2024-01-01 12:00:00", "1,000,000", "0x1F 0b1010",
        "<s>", "</s>", "<s>hello</s>", "<unk>", "<pad>", "<0x41>", "<0x0A>", "<<s>>", "<s >",
        "▁", "▁▁", " ▁ ", "a▁b", "▁hello", "hello▁", "▁ ▁", "\u2581\u2581\u2581 x",
        "a" * 1000, "ab" * 500, " " * 50 + "x" + " " * 50, "supercalifragilisticexpialidocious" * 20,
        "x" * 3000, "The " * 300, "\u4e2d" * 200, "🦙" * 100,
        "\u0000", "a\u0000b", "\x01\x02\x7f", "\u00a0nbsp\u00a0", "\u3000ideographic\u3000space",
        "\u2028line\u2029para", "\ufffd", "\ufeffBOM", "\uffff", "\U0010ffff", "\ue000 private",
        "\u200b zero width \u200d joiner", "tab\there", "mixed \t \n \r spaces",
        "def f(x):\n    return x ** 2\n", "https://example.com/path?q=1&r=2#frag",
        "!!!!!!", "....", "----", "====", "####", "``` code ```", "\"quoted\" 'single'",
        "<sep>", "<sep><sep><sep>", "x<sep>y", "@@ab c", "ab c", "ab  c", "<ctl>",
        "naïve café résumé", "Straße", "İstanbul", "ǅ", "ﬀ", "①②③", "ＡＢＣ full width",
    ]
    return texts


def random_texts(rng, count):
    pool = (list("abcdefghijklmnopqrstuvwxyz") * 4 + list("ABCXYZ0123456789") +
            list(" " * 20) + list(".,;:!?'\"()-_/<>[]{}") + ["\t", "\n", "\u2581", "  "] +
            list("éüñßçø") + list("日本語中文字한국") + ["🦙", "😀", "👍🏽", "e\u0301", "\u00a0", "\ufffd"] +
            ["the", "ing", "tion", " and ", "<s>", "</s>", "<sep>", "ab c"])
    out = []
    for _ in range(count):
        n = rng.randint(1, 40)
        out.append("".join(rng.choice(pool) for _ in range(n)))
    return out


def byte_cases(rng):
    cases = [b"\xff", b"ab\xffcd", b"\xc3", b"\xc3(", b"\xe2\x82", b"\xe2\x82x", b"\xed\xa0\x80",
             b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xf0\x80\x80\x80", b"\xf4\x90\x80\x80",
             b"\xf8\x88\x80\x80\x80", b"\x80\x80", b"\xbf", b" \xff ", b"\xff\xfe", b"caf\xe9",
             b"\xef\xbf\xbd", b"ok \xf0\x9f\xa6 broken llama", b"\xe2\x96", b"\xe2\x96\x81\xe2\x96"]
    for _ in range(40):
        n = rng.randint(1, 12)
        cases.append(bytes(rng.choice([rng.randint(0, 255), rng.randint(0x80, 0xff), 0x20, 0x61])
                           for _ in range(n)))
    return cases


def decode_cases(sp, rng, count):
    n = sp.vocab_size()
    byte_ids = [i for i in range(n) if sp.is_byte(i)]
    special = [i for i in range(n) if sp.is_control(i) or sp.is_unknown(i)]
    space_ids = [i for i in range(n) if sp.id_to_piece(i).startswith("\u2581")]
    out = []
    for _ in range(count):
        ids = []
        for _ in range(rng.randint(0, 12)):
            r = rng.random()
            if byte_ids and r < 0.35:
                ids.append(rng.choice(byte_ids))
            elif r < 0.45 and special:
                ids.append(rng.choice(special))
            elif r < 0.7 and space_ids:
                ids.append(rng.choice(space_ids))
            else:
                ids.append(rng.randrange(n))
        out.append({"ids": ids, "decoded": sp.decode(ids)})
    # Sequences sentencepiece decodes specially: BOS before the dummy-prefix space, lone U+2581
    # pieces at the start, bytes of one character split by a control piece.
    fixed = []
    for piece in ("\u2581", "\u2581\u2581", "\u2581a", "\u2581the", "\u2581t", "a"):
        pid = sp.piece_to_id(piece)
        if not sp.is_unknown(pid):
            for prefix in ([], [1], [1, 1], [pid], [0]):
                fixed.append(prefix + [pid, pid])
    if byte_ids:
        b = {sp.id_to_piece(i): i for i in byte_ids}
        e2, x96, x81 = b["<0xE2>"], b["<0x96>"], b["<0x81>"]
        fixed += [[e2, x96, x81], [e2, x96], [1, e2, x96, x81, e2], [e2, 1, x96, x81], [x81, x81],
                  [b["<0x20>"], sp.piece_to_id("\u2581a")]]
    for ids in fixed:
        out.append({"ids": ids, "decoded": sp.decode(ids)})
    return out


def encode_cases(sp, texts, raw):
    cases = []
    for t in texts:
        ids = sp.encode(t)
        cases.append({"text": t, "ids": ids, "decoded": sp.decode(ids)})
    for b in raw:
        ids = sp.encode(b)
        cases.append({"hex": b.hex(), "ids": ids, "decoded": sp.decode(ids)})
    return cases


def reference(sp, model_name, model_bytes, records, seed):
    rng = random.Random(seed)
    texts = edge_cases() + random_texts(rng, 300)
    alpaca, alpaca_decoded = [], []
    for i, rec in enumerate(records):
        row = []
        for field in FIELDS:
            ids = sp.encode(rec[field])
            row.append(ids)
            decoded = sp.decode(ids)
            if decoded != rec[field]:
                alpaca_decoded.append({"record": i, "field": field, "decoded": decoded})
        alpaca.append(row)
    return {
        "generator": "tests/reference/make_tokenizer_reference.py",
        "sentencepiece": spm.__version__,
        "tokenizer": model_name,
        "tokenizer_sha256": hashlib.sha256(model_bytes).hexdigest(),
        "vocab_size": sp.vocab_size(), "bos_id": sp.bos_id(), "eos_id": sp.eos_id(),
        "unk_id": sp.unk_id(), "pad_id": sp.pad_id(),
        "pieces": [sp.id_to_piece(i) for i in range(sp.vocab_size())] if sp.vocab_size() <= 1000 else None,
        "alpaca_file": ALPACA, "alpaca_records": len(records),
        "alpaca": alpaca, "alpaca_decoded": alpaca_decoded,
        "cases": encode_cases(sp, texts, byte_cases(rng)),
        "decode_cases": decode_cases(sp, rng, 200),
    }


def dump(obj):
    """Compact JSON, one alpaca record / case per line so that diffs stay readable."""
    def d(x):
        return json.dumps(x, ensure_ascii=False, separators=(",", ":"))
    lines = ["{"]
    items = list(obj.items())
    for k, (key, value) in enumerate(items):
        end = "," if k + 1 < len(items) else ""
        if isinstance(value, list) and value and isinstance(value[0], (list, dict)):
            lines.append(f"{d(key)}:[")
            lines += [d(v) + ("," if j + 1 < len(value) else "") for j, v in enumerate(value)]
            lines.append("]" + end)
        else:
            lines.append(f"{d(key)}:{d(value)}{end}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def train(sentences, **options):
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(sentences), model_writer=out,
                                   normalization_rule_name="identity", minloglevel=2, **options)
    return out.getvalue()


def main():
    records = json.load(open(os.path.join(ROOT, ALPACA), encoding="utf-8"))
    for name, model, seed in (("tok512", "stories260K/tokenizer.model", 512),
                              ("llama2", "llama2-tokenizer/tokenizer.model", 32000)):
        model_bytes = open(os.path.join(ROOT, model), "rb").read()
        sp = spm.SentencePieceProcessor(model_proto=model_bytes)
        ref = reference(sp, model, model_bytes, records, seed)
        path = os.path.join(ROOT, f"tokenizer_reference_{name}.json")
        open(path, "w", encoding="utf-8").write(dump(ref))
        print(f"{path}: {len(ref['cases'])} cases, {len(records)} alpaca records", file=sys.stderr)

    # Tiny models for the options LLaMA's tokenizers leave unused.
    corpus = [r["output"] for r in records[:400]] + [r["instruction"] for r in records[:400]]
    tiny = {
        "bpe-user": train(corpus, model_type="bpe", vocab_size=300, byte_fallback=False,
                          add_dummy_prefix=False, remove_extra_whitespaces=False,
                          user_defined_symbols=["<sep>", "<sep><sep>", "@@", "ab c"],
                          control_symbols=["<ctl>"]),
        "bpe-suffix": train(corpus, model_type="bpe", vocab_size=420, byte_fallback=True,
                            treat_whitespace_as_suffix=True),
    }
    base = train(corpus, model_type="bpe", vocab_size=300, byte_fallback=False)
    sp = spm.SentencePieceProcessor(model_proto=base)
    sp.set_vocabulary([sp.id_to_piece(i) for i in range(sp.vocab_size()) if i % 3 != 0])
    tiny["bpe-unused"] = sp.serialized_model_proto()
    tiny["unigram"] = train(corpus, model_type="unigram", vocab_size=200)

    os.makedirs(os.path.join(ROOT, "tokenizer-tiny"), exist_ok=True)
    refs = {}
    for name, model_bytes in tiny.items():
        model = f"tokenizer-tiny/{name}.model"
        open(os.path.join(ROOT, model), "wb").write(model_bytes)
        if name == "unigram":
            continue
        sp = spm.SentencePieceProcessor(model_proto=model_bytes)  # fresh load from the bytes
        refs[name] = reference(sp, model, model_bytes, records[:100], len(name))
    path = os.path.join(ROOT, "tokenizer_reference_tiny.json")
    lines = ["{"]
    for k, (name, ref) in enumerate(refs.items()):
        body = dump(ref).rstrip("\n")
        lines.append(f"{json.dumps(name)}:{body}" + ("," if k + 1 < len(refs) else ""))
    lines.append("}")
    open(path, "w", encoding="utf-8").write("\n".join(lines) + "\n")
    print(f"{path}: {', '.join(refs)}", file=sys.stderr)


if __name__ == "__main__":
    main()
