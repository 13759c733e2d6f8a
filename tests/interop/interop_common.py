"""Shared helpers of the interop suites (tests/interop/test_*.py): ft's programs against the real
Hugging Face tools (transformers, PEFT, sentencepiece) of the pinned pip environment.

Paths come from FT_BIN_DIR (the build's bin folder; default REPO/build/bin) and FT_SOURCE_DIR (the
repository root; default: two folders above this file). FT_INTEROP_KEEP=1 keeps the temporary
folders (their paths are printed) to look at a failure.

Only the standard library is imported at the top: the sentencepiece suite never loads torch.
The torch helpers import torch / transformers when first called (init_torch() does it once).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.environ.get("FT_SOURCE_DIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BIN = os.path.abspath(os.environ.get("FT_BIN_DIR") or os.path.join(ROOT, "build", "bin"))
DATA = os.path.join(ROOT, "tests", "data")
STORIES = os.path.join(DATA, "stories260K")
STORIES_TOKENIZER = os.path.join(STORIES, "tokenizer.model")

# No network and no progress bars from the Hugging Face libraries; set before they are imported.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# fp32 logits of ft and transformers agree to this (the bound), or to twice the reference's
# own fp32 rounding error where that is larger (see check_fp32).
FP32_TOL = 1e-5


# --------------------------------------------------------------------------------------------
# Running ft's programs


def ft_uses_this_torch():
    """Whether ft's build links the LibTorch of the torch these tests import (its CMakeCache's
    Torch_DIR inside the torch package): false for build/ (Debian's 1.13) beside the pip torch,
    whose CPU bf16 products round differently. True when the build folder cannot tell."""
    import torch
    cache = os.path.join(os.path.dirname(BIN), "CMakeCache.txt")
    if not os.path.exists(cache):
        return True
    with open(cache) as f:
        torch_dir = next((line.split("=", 1)[1].strip() for line in f if line.startswith("Torch_DIR:")), "")
    if not torch_dir or torch_dir.endswith("-NOTFOUND"):
        return True
    package = os.path.realpath(os.path.dirname(torch.__file__))
    return os.path.realpath(torch_dir).startswith(package + os.sep)


def program(name):
    path = os.path.join(BIN, name)
    if not os.access(path, os.X_OK):
        raise AssertionError(f"{path} not found: build the interop programs first "
                             f"(ninja -C build interop_programs), or set FT_BIN_DIR to the build's bin folder")
    return path


def _tail(text, n=4000):
    text = text or ""
    return text if len(text) <= n else "...\n" + text[-n:]


def run_ft(name, args, *, expect_ok=True, timeout=300, cwd=None, env=None):
    """Runs BIN/name with args; returns the CompletedProcess (text). With expect_ok, a non-zero exit
    raises AssertionError showing the command, the exit code and the output's tails."""
    cmd = [program(name)] + [str(a) for a in args]
    full_env = dict(os.environ)
    full_env.update(env or {})
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout, cwd=cwd,
                                env=full_env)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"{' '.join(cmd)} ran past {timeout} s\n--- stdout\n{_tail(e.stdout and str(e.stdout))}"
                             f"\n--- stderr\n{_tail(e.stderr and str(e.stderr))}")
    if expect_ok and result.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {result.returncode}\n--- stdout\n{_tail(result.stdout)}"
                             f"\n--- stderr\n{_tail(result.stderr)}")
    return result


class TempDir:
    """A temporary folder removed at close() unless FT_INTEROP_KEEP=1."""

    def __init__(self, label):
        self.path = tempfile.mkdtemp(prefix=f"ft_interop_{label}_")
        if os.environ.get("FT_INTEROP_KEEP") == "1":
            print(f"[{label}] keeping {self.path}", flush=True)

    def file(self, *parts):
        return os.path.join(self.path, *parts)

    def close(self):
        if os.environ.get("FT_INTEROP_KEEP") != "1":
            shutil.rmtree(self.path, ignore_errors=True)


def class_temp_dir(cls, label):
    """A TempDir for a TestCase class, removed when the class is done."""
    d = TempDir(label)
    cls.addClassCleanup(d.close)
    return d


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f)
    return path


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def report(case, what, value, tol=None, note=""):
    """Prints one measured difference (the closing note quotes these lines)."""
    extra = [] if tol is None else [f"tolerance {tol:.3g}"]
    if note:
        extra.append(note)
    bound = f" ({'; '.join(extra)})" if extra else ""
    print(f"max |d{what}| {case}: {value:.3g}{bound}", flush=True)


# --------------------------------------------------------------------------------------------
# torch / transformers side

_torch_ready = False


def init_torch():
    """Imports torch and transformers once, one thread (the machine has 2 cores and ft's programs
    run beside), quiet loggers."""
    global _torch_ready
    import torch
    if not _torch_ready:
        torch.set_num_threads(1)
        import transformers
        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
        try:
            import peft  # noqa: F401  (warm the import here, not inside a timed test)
        except ImportError:
            pass
        _torch_ready = True
    return torch


def quiet_warnings():
    """Silences the libraries' deprecation and PEFT warnings (the tests check what those warn
    about themselves). Call it from setUpModule: unittest's runner resets the filters before."""
    import warnings
    warnings.simplefilter("ignore")


def max_abs_diff(a, b):
    torch = init_torch()
    a = torch.as_tensor(a).double()
    b = torch.as_tensor(b).double()
    if a.shape != b.shape:
        raise AssertionError(f"shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}")
    if a.numel() == 0:
        return 0.0
    return float((a - b).abs().max())


def randomize_llama_(model, seed):
    """Gives every weight a scale that keeps activations O(1) (HF's init, std 0.02, leaves logits
    near 0 and attention near uniform, which would hide errors in RoPE, masking or the head):
    matrices N(0, 1/fan_in), embeddings N(0, 1) (N(0, 1/hidden) when they are also the tied head,
    as an untied head is, so logits stay a few units), RMSNorm weights 1 + N(0, 0.2^2), projection
    biases (qwen2, llama with attention_bias) N(0, 0.5^2)."""
    torch = init_torch()
    g = torch.Generator().manual_seed(seed)
    tied = model.config.tie_word_embeddings
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g) * (p.shape[1] ** -0.5 if tied else 1.0))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * p.shape[1] ** -0.5)


# transformers' config and model classes of each model type ft reads (io/hf_config.h).
MODEL_CLASSES = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "mistral": ("MistralConfig", "MistralForCausalLM"),
                 "qwen2": ("Qwen2Config", "Qwen2ForCausalLM")}


def make_random_llama(out_dir, seed, *, hidden=32, layers=2, heads=4, kv_heads=2, intermediate=64, vocab=512,
                      tie=False, rope_scaling=None, rope_theta=10000.0, head_dim=None, max_positions=256,
                      rms_norm_eps=1e-5, dtype="float32", model_type="llama", extra=None):
    """A random LLaMA-family model (model_type llama, mistral or qwen2; `extra`: more config
    fields, e.g. sliding_window) made and saved by transformers (model.safetensors, config.json as
    this transformers writes it: rope_parameters), with stories260K's tokenizer.model copied in
    (ft wants one; vocab 512 fits it). Returns the folder."""
    torch = init_torch()
    import transformers
    config_class, model_class = (getattr(transformers, n) for n in MODEL_CLASSES[model_type])
    kwargs = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
                  num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=max_positions,
                  tie_word_embeddings=tie, rms_norm_eps=rms_norm_eps, rope_theta=rope_theta,
                  bos_token_id=1, eos_token_id=2)
    if rope_scaling is not None:
        kwargs["rope_scaling"] = dict(rope_scaling)
    if head_dim is not None:
        kwargs["head_dim"] = head_dim
    kwargs.update(extra or {})
    config = config_class(**kwargs)
    torch.manual_seed(seed)
    model = model_class(config)
    randomize_llama_(model, seed)
    model.to(getattr(torch, dtype))
    # transformers 5 always writes safetensors (save_pretrained has no safe_serialization any more).
    model.save_pretrained(out_dir)
    if not os.path.exists(os.path.join(out_dir, "model.safetensors")):
        raise AssertionError(f"{out_dir}: transformers wrote no model.safetensors: {os.listdir(out_dir)}")
    saved_type = read_json(os.path.join(out_dir, "config.json")).get("model_type")
    if saved_type != model_type:
        raise AssertionError(f"{out_dir}: transformers wrote model_type {saved_type!r}, not {model_type!r}")
    shutil.copy(STORIES_TOKENIZER, os.path.join(out_dir, "tokenizer.model"))
    return out_dir


def load_hf(model_dir, dtype="float32"):
    """transformers' LlamaForCausalLM from a folder, eager attention (the reference), eval mode."""
    return load_hf_impl(model_dir, "eager", dtype)


def load_hf_impl(model_dir, attn_implementation, dtype="float32"):
    torch = init_torch()
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation=attn_implementation,
                                                 dtype=getattr(torch, dtype))
    return model.eval()


def hf_logits(model, input_ids, position_ids=None):
    """Logits [B,T,V] in fp32 (fp64 for an fp64 model). use_cache=False: transformers looks for
    packed sequences in position_ids only without a cache."""
    torch = init_torch()
    ids = torch.as_tensor(input_ids, dtype=torch.long)
    kwargs = {"use_cache": False}
    if position_ids is not None:
        kwargs["position_ids"] = torch.as_tensor(position_ids, dtype=torch.long)
    with torch.no_grad():
        logits = model(input_ids=ids, **kwargs).logits
    return logits if logits.dtype == torch.float64 else logits.float()


def check_fp32(test, case, ft, ref32, ref64, what="logits", floor=FP32_TOL):
    """ft's fp32 output against the reference's fp32 one: max |d| <= FP32_TOL (1e-5), or twice the
    reference's own fp32 rounding error (its fp32 result against the same code in fp64) where that
    is larger. The second bound is for stories260K, whose logits reach 22: there fp32 itself
    (eps 1.9e-6 at that size) gives transformers 1.2e-5 from its fp64 result, and its eager and sdpa
    kernels differ by 1.4e-5, so 1e-5 would test rounding luck. Returns the difference."""
    own = max_abs_diff(ref32, ref64)
    tol = max(floor, 2 * own)
    d = max_abs_diff(ft, ref32)
    report(case, what, d, tol, f"reference fp32 vs fp64 {own:.3g}, ft vs fp64 {max_abs_diff(ft, ref64):.3g}")
    test.assertLessEqual(d, tol, f"{case}: ft differs from the reference by {d:.3g} (tolerance {tol:.3g})")
    return d


def ft_logits(workdir, model_dir, input_ids, *, position_ids=None, segment_ids=None, adapter=None, dtype="fp32",
              attention="eager", expect_ok=True):
    """ft's logits [B,T,V] (fp32) from build/bin/ft_logits; returns the tensor, or the
    CompletedProcess when expect_ok is False and the program failed."""
    torch = init_torch()
    from safetensors.torch import load_file
    fd, ids_path = tempfile.mkstemp(suffix=".json", dir=workdir)
    os.close(fd)
    out_path = ids_path[:-5] + ".safetensors"
    ids = {"input_ids": torch.as_tensor(input_ids).tolist()}
    if position_ids is not None:
        ids["position_ids"] = torch.as_tensor(position_ids).tolist()
    if segment_ids is not None:
        ids["segment_ids"] = torch.as_tensor(segment_ids).tolist()
    write_json(ids_path, ids)
    args = ["--model", model_dir, "--dtype", dtype, "--attention", attention, "--ids", ids_path, "--out", out_path]
    if adapter is not None:
        args += ["--adapter", adapter]
    result = run_ft("ft_logits", args, expect_ok=expect_ok)
    if result.returncode != 0:
        return result
    return load_file(out_path)["logits"]


def sdpa_unavailable(result):
    """True when ft_logits refused --attention sdpa because its LibTorch is 1.x."""
    return result.returncode != 0 and "sdpa needs LibTorch 2.0" in result.stderr


def safetensors_dict(path):
    from safetensors.torch import load_file
    return load_file(path)


# --------------------------------------------------------------------------------------------
# PEFT


def make_peft_adapter(base_dir, out_dir, seed, *, save_dtype="float32", randomize=True, **lora_kwargs):
    """An adapter saved by PEFT itself (get_peft_model + save_pretrained, safetensors) for the model
    in base_dir. With randomize, every LoRA weight is drawn from a seeded generator (A ~ N(0,
    1/in), B ~ N(0, 0.03^2)), so A and B are both non-zero and the adapter moves the logits; the
    weights are cast to save_dtype before saving. Returns out_dir."""
    torch = init_torch()
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(init_lora_weights=False, **lora_kwargs))
    if randomize:
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if ".lora_A." in name:
                    p.copy_(torch.randn(p.shape, generator=g) * p.shape[1] ** -0.5)
                elif ".lora_B." in name:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.03)
    if save_dtype != "float32":
        model.to(getattr(torch, save_dtype))
    model.save_pretrained(out_dir, safe_serialization=True)
    return out_dir


def load_peft(base_dir, adapter_dir, dtype="float32"):
    """PeftModel.from_pretrained on a fresh transformers base (eager attention), eval mode."""
    from peft import PeftModel
    return PeftModel.from_pretrained(load_hf(base_dir, dtype), adapter_dir).eval()


def adapter_tensors(adapter_dir):
    return safetensors_dict(os.path.join(adapter_dir, "adapter_model.safetensors"))


def adapter_dtypes(adapter_dir):
    from safetensors import safe_open
    with safe_open(os.path.join(adapter_dir, "adapter_model.safetensors"), "pt") as f:
        return {k: f.get_slice(k).get_dtype() for k in f.keys()}


# --------------------------------------------------------------------------------------------
# Short ft_train runs on the real stories260K model

SHORT_TEMPLATE = {"base": "alpaca", "prompt": "{instruction}\n", "prompt_with_input": "{instruction}\n{input}\n"}


def write_small_dataset(path, records=24):
    """The first alpaca_train records as JSON Lines (with the short template of SHORT_TEMPLATE
    every one of them has target tokens within 64 tokens)."""
    all_records = read_json(os.path.join(DATA, "datasets", "alpaca_train.json"))
    with open(path, "w", encoding="utf-8") as f:
        for r in all_records[:records]:
            f.write(json.dumps(r) + "\n")
    return path


def train_config(run_dir, dataset, *, model=STORIES, lora=None, strategy="ddp", lr=1e-2, steps=3, global_batch=4,
                 micro_batch=2, seed=42, extra_train=None):
    """A run config of `steps` optimizer steps of `global_batch` sequences of <= 64 tokens."""
    c = {
        "run_dir": run_dir,
        "model": {"path": model},
        "data": {"train": dataset, "max_seq_len": 64, "template": SHORT_TEMPLATE},
        "parallel": {"strategy": strategy, "timeout_s": 60},
        "train": {"global_batch_size": global_batch, "micro_batch_size": micro_batch, "max_steps": steps, "lr": lr,
                  "seed": seed, "threads": 1},
        "log": {"every_steps": 1},
    }
    if lora is not None:
        c["lora"] = lora
    c["train"].update(extra_train or {})
    return c


def run_train(config, config_path, ranks=1, timeout=300):
    """Writes the config and runs ft_train on it (through ft_launch for ranks > 1); returns its
    run folder."""
    write_json(config_path, config)
    if ranks == 1:
        run_ft("ft_train", [config_path], timeout=timeout)
    else:
        run_ft("ft_launch", ["--nproc_per_node", ranks, program("ft_train"), config_path], timeout=timeout)
    return config["run_dir"]


def stories_prompt_ids():
    """Two rows of 24 ids for stories260K: a tokenized sentence (BOS first) and seeded random ids."""
    import random
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=STORIES_TOKENIZER)
    text = [1] + sp.encode("Once upon a time, there was a little girl named Lily. She loved to play outside.")
    rng = random.Random(260)
    text = (text + [rng.randrange(3, 512) for _ in range(24)])[:24]
    return [text, [1] + [rng.randrange(3, 512) for _ in range(23)]]


if __name__ == "__main__":
    print(f"ROOT={ROOT}\nBIN={BIN}", file=sys.stderr)
