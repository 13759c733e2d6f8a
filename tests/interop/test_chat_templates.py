"""ft's chat templates against transformers' apply_chat_template with the models' own Jinja
chat templates: the token ids ft_prep writes for every conversation of the bundled chat and
ShareGPT datasets equal, id for id, those of

  llama3: the chat_template of meta-llama/Meta-Llama-3-8B-Instruct (LLAMA3_TEMPLATE below, copied
          from its tokenizer_config.json), with the Llama 3 tokenizer;
  chatml: the chat_template of Qwen/Qwen2.5-7B-Instruct without its tool branch (QWEN25_TEMPLATE;
          it puts "You are Qwen, ..." first when a conversation has no system message, which ft
          does with data.template {"base": "chatml", "default_system": ...}), with the Qwen2-style
          tokenizer of tests/data/qwen2-tiny.

And a record that spells special tokens keeps them as text: ft's ids equal transformers' with
split_special_tokens=True for the contents and the template's own special tokens as ids.
"""
import json
import os
import shutil
import struct
import unittest

import interop_common as ic

LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
QWEN25_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) or "
    "(message.role == 'assistant') %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
QWEN_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


def read_ftok(path):
    """Samples of a token file (lib/data/token_file.h): [(ids, targets), ...]."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"FTTOKENS"
    n, t = struct.unpack_from("<QQ", data, 48)
    offsets = struct.unpack_from("<%dQ" % (n + 1), data, 128)
    tokens_at = 128 + 8 * (n + 1)
    tokens = struct.unpack_from("<%di" % t, data, tokens_at)
    targets = data[tokens_at + 4 * t: tokens_at + 5 * t]
    return [(list(tokens[offsets[i]:offsets[i + 1]]), list(targets[offsets[i]:offsets[i + 1]])) for i in range(n)]


def conversations(path, fmt):
    out = []
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    for line in lines:
        r = json.loads(line)
        if fmt == "chat":
            out.append(r["messages"])
            continue
        role = {"human": "user", "gpt": "assistant", "system": "system"}
        messages = [{"role": "system", "content": r["system"]}] if r.get("system") else []
        messages += [{"role": role[t["from"]], "content": t["value"]} for t in r["conversations"]]
        out.append(messages)
    return out


class ChatTemplates(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        ic.init_torch()
        from transformers import AutoTokenizer
        cls.dir = ic.class_temp_dir(cls, "chat_templates").path
        # A model folder for the Llama 3 tokenizer: ft_prep needs a config.json beside it.
        cls.llama3 = os.path.join(cls.dir, "llama3")
        os.makedirs(cls.llama3)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(ic.DATA, "llama3-tokenizer", name), cls.llama3)
        shutil.copy(os.path.join(ic.ROOT, "configs", "models", "meta-llama", "Llama-3.1-8B", "config.json"), cls.llama3)
        cls.qwen = os.path.join(ic.DATA, "qwen2-tiny")
        cls.hf = {"llama3": AutoTokenizer.from_pretrained(cls.llama3), "chatml": AutoTokenizer.from_pretrained(cls.qwen)}
        cls.hf["llama3"].chat_template = LLAMA3_TEMPLATE
        cls.hf["chatml"].chat_template = QWEN25_TEMPLATE

    def ft_samples(self, model, dataset, fmt, template, label):
        run_dir = os.path.join(self.dir, label)
        config = {"run_dir": run_dir, "model": {"path": model},
                  "data": {"train": dataset, "format": fmt, "template": template, "max_seq_len": 4096},
                  "lora": {"r": 4}, "train": {"global_batch_size": 1, "lr": 1e-4}}
        path = ic.write_json(os.path.join(self.dir, label + ".json"), config)
        ic.run_ft("ft_prep", [path])
        return read_ftok(os.path.join(run_dir, "tokens", "train.ftok"))

    def expected(self, family, messages):
        tok = self.hf[family]
        ids = tok.apply_chat_template(messages, tokenize=True, return_dict=False)
        return list(ids["input_ids"] if isinstance(ids, dict) else ids)

    def check_dataset(self, family, model, dataset, fmt, template):
        label = "%s_%s" % (family, os.path.basename(dataset).split(".")[0])
        samples = self.ft_samples(model, dataset, fmt, template, label)
        convs = conversations(dataset, fmt)
        self.assertEqual(len(samples), len(convs))
        mismatches = sum(ids != self.expected(family, m) for (ids, _), m in zip(samples, convs))
        print(f"{label}: {mismatches} of {len(convs)} conversations differ from apply_chat_template", flush=True)
        self.assertEqual(mismatches, 0)
        # Targets: the assistant contents and their end-of-turn token, nothing of the prompts.
        ids, targets = samples[0]
        self.assertEqual(targets[0], 0)
        self.assertGreater(sum(targets), 0)

    def test_llama3_matches_metas_template(self):
        for name, fmt in (("alpaca_chat.jsonl", "chat"), ("alpaca_sharegpt.jsonl", "sharegpt")):
            self.check_dataset("llama3", self.llama3, os.path.join(ic.DATA, "datasets", name), fmt, "auto")

    def test_chatml_matches_qwen25s_template(self):
        template = {"base": "chatml", "default_system": QWEN_SYSTEM}
        for name, fmt in (("alpaca_chat.jsonl", "chat"), ("alpaca_sharegpt.jsonl", "sharegpt")):
            self.check_dataset("chatml", self.qwen, os.path.join(ic.DATA, "datasets", name), fmt, template)

    def test_special_token_text_in_records_stays_text(self):
        record = {"messages": [{"role": "user", "content": "Say <|eot_id|> and <|im_end|> please."},
                               {"role": "assistant", "content": "<|start_header_id|>system<|end_header_id|> ok <|im_start|>"}]}
        dataset = ic.write_json(os.path.join(self.dir, "specials.json"), [record])
        for family, model in (("llama3", self.llama3), ("chatml", self.qwen)):
            (ids, _), = self.ft_samples(model, dataset, "chat", "auto", "specials_" + family)
            tok = self.hf[family]
            # transformers with the contents' special-token text split as text: render each turn with
            # a placeholder, then encode the contents with split_special_tokens=True.
            rendered = tok.apply_chat_template(record["messages"], tokenize=False)
            pieces = rendered.split(record["messages"][0]["content"])
            before, rest = pieces[0], pieces[1]
            middle, after = rest.split(record["messages"][1]["content"])
            enc = lambda s, split: tok(s, add_special_tokens=False, split_special_tokens=split)["input_ids"]
            expected = (enc(before, False) + enc(record["messages"][0]["content"].strip(), True) + enc(middle, False)
                        + enc(record["messages"][1]["content"].strip(), True) + enc(after, False))
            if family == "chatml":
                # No default system here: ft's chatml adds none, Qwen2.5's template does.
                system = "<|im_start|>system\n%s<|im_end|>\n" % QWEN_SYSTEM
                self.assertTrue(before.startswith(system))
                expected = enc(before[len(system):], False) + expected[len(enc(before, False)):]
            self.assertEqual(ids, expected)


if __name__ == "__main__":
    unittest.main()
