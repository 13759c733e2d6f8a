"""transformers' LlamaForCausalLM (eager attention, the reference) and ft (build/bin/ft_logits)
give the same logits on the same model folder: random small models that transformers itself makes
and saves (GQA, MQA, MHA, tied and untied heads, a head_dim that is not hidden/heads, rope_scaling
linear and llama3 — written the way transformers 5 writes them, in rope_parameters, and the way
transformers 4 did, rope_scaling + rope_theta at the top level), a packed batch, and the bundled
stories260K. Model types (ModelTypes): LLaMA-3.x style (llama3 RoPE, theta 500000, tied, GQA),
llama with attention_bias, MistralForCausalLM with a sliding window shorter than the batch,
Qwen2ForCausalLM with random non-zero q/k/v biases, and qwen2 with use_sliding_window on its last
layer; each also checks that what it adds (window, biases) changes the logits.

fp32: max |dlogits| <= 1e-5 (interop_common.check_fp32: or twice transformers' own fp32 rounding
error, measured against transformers in fp64, where that is larger: only stories260K, whose logits
reach 22). bf16: see BF16_ULPS below.
"""
import os
import shutil
import unittest

import interop_common as ic

torch = ic.init_torch()

# bf16 keeps 8 significant bits: the spacing of bf16 numbers in [1, 2) is eps = 2^-7, so a value
# of magnitude M is held to about eps * M. ft and transformers round the same tensors at the same
# points (weights, every matrix product's output, the residual stream; RMSNorm and softmax in
# fp32), but their products accumulate in different orders, and each differing rounding moves a
# value by one spacing. Over the 2 layers of these models plus the head that stays a few spacings
# at the logits' scale: we allow BF16_ULPS spacings of the largest fp32 logit, and separately
# require ft's bf16 error against the fp32 reference to be no larger than transformers' own bf16
# error plus one spacing (ft is no less accurate in bf16 than transformers).
BF16_EPS = 2.0 ** -7
BF16_ULPS = 4

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}
CASES = {
    "gqa_untied": dict(heads=4, kv_heads=2, tie=False),
    "mqa_tied": dict(heads=4, kv_heads=1, tie=True),
    "mha_tied": dict(hidden=64, heads=4, kv_heads=4, intermediate=96, tie=True),
    "gqa_head_dim_16": dict(heads=4, kv_heads=2, head_dim=16, tie=False),
    "rope_linear": dict(heads=4, kv_heads=2, rope_scaling={"rope_type": "linear", "factor": 4.0}, tie=False),
    "rope_llama3": dict(heads=4, kv_heads=2, rope_scaling=LLAMA3, rope_theta=500000.0, tie=True),
}
SEQ = 24
# Model types other than plain llama: (seed, make_random_llama arguments). Their own seeds, so that
# the cases above keep theirs.
TYPE_CASES = {
    "llama3_tied_gqa": (2001, dict(heads=4, kv_heads=2, tie=True, rope_scaling=LLAMA3, rope_theta=500000.0,
                                   extra={"eos_token_id": [2, 3]})),
    "llama_attention_bias": (2002, dict(heads=4, kv_heads=2, extra={"attention_bias": True})),
    "mistral_window_8": (2003, dict(heads=4, kv_heads=2, model_type="mistral", extra={"sliding_window": 8})),
    "qwen2_biases": (2004, dict(heads=4, kv_heads=2, model_type="qwen2")),
    "qwen2_tied_biases": (2005, dict(heads=4, kv_heads=1, tie=True, model_type="qwen2")),
    "qwen2_window_last_layer": (2006, dict(heads=4, kv_heads=2, model_type="qwen2",
                                           extra={"use_sliding_window": True, "sliding_window": 8,
                                                  "max_window_layers": 1})),
}


def setUpModule():
    ic.quiet_warnings()
    global TMP
    TMP = ic.TempDir("logits")


def tearDownModule():
    TMP.close()


_models = {}


def random_model(case):
    if case not in _models:
        if case in TYPE_CASES:
            seed, kwargs = TYPE_CASES[case]
        else:
            seed, kwargs = 1000 + sorted(CASES).index(case), CASES[case]
        _models[case] = ic.make_random_llama(TMP.file(case), seed, **kwargs)
    return _models[case]


def batch():
    """Two rows: positions 0..23, and 150..173 (past llama3's original 64 positions, so every
    RoPE frequency band is exercised)."""
    g = torch.Generator().manual_seed(24)
    ids = torch.randint(0, 512, (2, SEQ), generator=g)
    pos = torch.stack([torch.arange(SEQ), torch.arange(150, 150 + SEQ)])
    return ids, pos


def check_bf16(test, case, model_dir, ids, pos, ref32):
    hf16 = ic.hf_logits(ic.load_hf(model_dir, "bfloat16"), ids, pos)
    ft16 = ic.ft_logits(TMP.path, model_dir, ids, position_ids=pos, dtype="bf16", attention="eager")
    scale = float(ref32.abs().max())
    tol = BF16_ULPS * BF16_EPS * scale
    d = ic.max_abs_diff(ft16, hf16)
    ic.report(f"{case} bf16 ft vs transformers bf16", "logits", d, tol)
    hf_err = ic.max_abs_diff(hf16, ref32)
    ft_err = ic.max_abs_diff(ft16, ref32)
    ic.report(f"{case} bf16 transformers vs its fp32", "logits", hf_err)
    ic.report(f"{case} bf16 ft vs transformers fp32", "logits", ft_err, hf_err + BF16_EPS * scale)
    test.assertLessEqual(d, tol, f"{case}: ft bf16 logits differ from transformers bf16 by {d:.3g}")
    test.assertGreater(ft_err, 100 * ic.FP32_TOL, f"{case}: ft's --dtype bf16 gave fp32 results")
    if not ic.ft_uses_this_torch():
        # Against another LibTorch's bf16 kernels the accuracy race says nothing about ft.
        print(f"{case}: ft is built with another LibTorch than this torch {torch.__version__}: "
              "its bf16 error is not held to transformers'", flush=True)
        return
    test.assertLessEqual(ft_err, hf_err + BF16_EPS * scale,
                         f"{case}: ft's bf16 error {ft_err:.3g} exceeds transformers' {hf_err:.3g} by more than a spacing")


class RandomModels(unittest.TestCase):
    """Each case: fp32 with ft's eager and auto kernels, bf16 (eager)."""

    def check(self, case):
        model_dir = random_model(case)
        ids, pos = batch()
        ref = ic.hf_logits(ic.load_hf(model_dir), ids, pos)
        ref64 = ic.hf_logits(ic.load_hf(model_dir, "float64"), ids, pos)
        self.assertGreater(float(ref.abs().max()), 1.0, "the random model's logits are too small to test anything")
        for kernel in ("eager", "auto"):
            ft = ic.ft_logits(TMP.path, model_dir, ids, position_ids=pos, attention=kernel)
            ic.check_fp32(self, f"{case} fp32 {kernel}", ft, ref, ref64)
        check_bf16(self, case, model_dir, ids, pos, ref)
        return model_dir, ids, pos, ft

    def check_scaling_matters(self, case, model_dir, ids, pos, ft):
        """The same weights without rope scaling give other logits, so the comparison above saw it."""
        plain = TMP.file(case + "_no_scaling")
        if not os.path.exists(plain):
            shutil.copytree(model_dir, plain)
            config = ic.read_json(os.path.join(plain, "config.json"))
            theta = config["rope_parameters"]["rope_theta"]
            config["rope_parameters"] = {"rope_type": "default", "rope_theta": theta}
            ic.write_json(os.path.join(plain, "config.json"), config)
        d = ic.max_abs_diff(ic.hf_logits(ic.load_hf(plain), ids, pos), ft)
        ic.report(f"{case} ft vs transformers without the scaling (must be large)", "logits", d)
        self.assertGreater(d, 1000 * ic.FP32_TOL, f"{case}: rope scaling changes nothing here; the test cannot see it")

    def test_gqa_untied(self):
        self.check("gqa_untied")

    def test_mqa_tied(self):
        self.check("mqa_tied")

    def test_mha_tied(self):
        self.check("mha_tied")

    def test_head_dim_not_hidden_over_heads(self):
        self.check("gqa_head_dim_16")

    def test_rope_scaling_linear(self):
        self.check_scaling_matters("rope_linear", *self.check("rope_linear"))

    def test_rope_scaling_llama3(self):
        self.check_scaling_matters("rope_llama3", *self.check("rope_llama3"))

    def test_rope_scaling_in_transformers4_layout(self):
        """config.json as transformers 4 wrote it (rope_theta and rope_scaling at the top level,
        "type" for linear): ft reads the same model as from rope_parameters."""
        ids, pos = batch()
        for case, type_key in (("rope_llama3", "rope_type"), ("rope_linear", "type")):
            model_dir = random_model(case)
            legacy = TMP.file(case + "_legacy")
            if not os.path.exists(legacy):
                shutil.copytree(model_dir, legacy)
                config = ic.read_json(os.path.join(legacy, "config.json"))
                rope = config.pop("rope_parameters")
                config["rope_theta"] = rope.pop("rope_theta")
                rope[type_key] = rope.pop("rope_type")
                config["rope_scaling"] = rope
                ic.write_json(os.path.join(legacy, "config.json"), config)
            ref = ic.hf_logits(ic.load_hf(model_dir), ids, pos)
            ref64 = ic.hf_logits(ic.load_hf(model_dir, "float64"), ids, pos)
            ft = ic.ft_logits(TMP.path, legacy, ids, position_ids=pos)
            ic.check_fp32(self, f"{case} fp32, transformers-4 config layout", ft, ref, ref64)

    def test_sdpa_kernel(self):
        """ft's sdpa kernel (LibTorch 2.x only; a 1.13 build refuses it, and the test says so)."""
        check_sdpa_cases(self, ("gqa_untied", "rope_llama3"))


def check_sdpa_cases(test, cases):
    """ft's sdpa kernel against transformers for each random model case; skips the test where this
    ft build's LibTorch (1.13) has no sdpa."""
    ids, pos = batch()
    for case in cases:
        model_dir = random_model(case)
        ft = ic.ft_logits(TMP.path, model_dir, ids, position_ids=pos, attention="sdpa", expect_ok=False)
        if not isinstance(ft, torch.Tensor):
            if ic.sdpa_unavailable(ft):
                test.skipTest("this ft build's LibTorch has no sdpa: " + ft.stderr.strip().splitlines()[-1])
            test.fail(f"ft_logits --attention sdpa failed:\n{ft.stderr}")
        ref = ic.hf_logits(ic.load_hf(model_dir), ids, pos)
        ref64 = ic.hf_logits(ic.load_hf(model_dir, "float64"), ids, pos)
        ic.check_fp32(test, f"{case} fp32 sdpa", ft, ref, ref64)


def edited_copy(case, suffix, edit):
    """A copy of the case's model folder with config.json (dict) and the tensors (dict) edited."""
    from safetensors.torch import save_file
    src = random_model(case)
    dst = TMP.file(case + suffix)
    if not os.path.exists(dst):
        shutil.copytree(src, dst)
        config = ic.read_json(os.path.join(dst, "config.json"))
        tensors = ic.safetensors_dict(os.path.join(dst, "model.safetensors"))
        edit(config, tensors)
        ic.write_json(os.path.join(dst, "config.json"), config)
        save_file(tensors, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    return dst


class ModelTypes(unittest.TestCase):
    """llama 3.x, mistral, qwen2: fp32 (eager, auto), bf16, as RandomModels; and what each type adds
    (a window, biases) matters: transformers without it gives other logits."""

    check = RandomModels.check

    def must_differ(self, case, what, other_dir, ft, ids, pos):
        d = ic.max_abs_diff(ic.hf_logits(ic.load_hf(other_dir), ids, pos), ft)
        ic.report(f"{case} ft vs transformers {what} (must be large)", "logits", d)
        self.assertGreater(d, 1000 * ic.FP32_TOL, f"{case}: {what} changes nothing here; the test cannot see it")

    def test_llama3_tied_gqa(self):
        case = "llama3_tied_gqa"
        self.check(case)
        config = ic.read_json(os.path.join(random_model(case), "config.json"))
        self.assertEqual((config["model_type"], config["tie_word_embeddings"], config["rope_parameters"]["rope_type"]),
                         ("llama", True, "llama3"))

    def test_llama_attention_bias(self):
        case = "llama_attention_bias"
        model_dir, ids, pos, ft = self.check(case)

        def no_bias(config, tensors):
            config["attention_bias"] = False
            for name in [n for n in tensors if n.endswith(".bias")]:
                del tensors[name]
        self.must_differ(case, "without the biases", edited_copy(case, "_no_bias", no_bias), ft, ids, pos)

    def test_mistral_sliding_window(self):
        case = "mistral_window_8"
        model_dir, ids, pos, ft = self.check(case)
        self.assertEqual(ic.read_json(os.path.join(model_dir, "config.json"))["sliding_window"], 8)

        def no_window(config, tensors):
            config["sliding_window"] = None
        self.must_differ(case, "without the window", edited_copy(case, "_no_window", no_window), ft, ids, pos)

    def test_qwen2_biases(self):
        for case in ("qwen2_biases", "qwen2_tied_biases"):
            with self.subTest(case=case):
                model_dir, ids, pos, ft = self.check(case)
                tensors = ic.safetensors_dict(os.path.join(model_dir, "model.safetensors"))
                biases = sorted(n for n in tensors if n.endswith(".bias"))
                self.assertEqual(len(biases), 6, biases)  # q, k, v in 2 layers; o_proj has none
                self.assertTrue(all(float(tensors[n].abs().max()) > 0.1 for n in biases))

                def zero_biases(config, tensors):
                    for name in tensors:
                        if name.endswith(".bias"):
                            tensors[name] = torch.zeros_like(tensors[name])
                self.must_differ(case, "with zero biases", edited_copy(case, "_zero_bias", zero_biases), ft, ids, pos)

    def test_qwen2_sliding_window_on_some_layers(self):
        case = "qwen2_window_last_layer"
        model_dir, ids, pos, ft = self.check(case)
        config = ic.read_json(os.path.join(model_dir, "config.json"))
        self.assertEqual(config["layer_types"], ["full_attention", "sliding_attention"])

        def no_window(config, tensors):
            config["use_sliding_window"] = False
            config["sliding_window"] = None
            config["layer_types"] = ["full_attention", "full_attention"]
        self.must_differ(case, "without the window", edited_copy(case, "_no_window", no_window), ft, ids, pos)

    def test_sdpa_kernel(self):
        """The window and the biases with ft's sdpa kernel (LibTorch 2.x only)."""
        check_sdpa_cases(self, ("mistral_window_8", "qwen2_biases", "qwen2_window_last_layer"))


class PackedBatch(unittest.TestCase):
    """Row 0 packs sequence A (11 tokens) and B (9 tokens) plus 4 padding tokens: position_ids
    restart at each sequence; ft gets segment_ids 0, 1 and -1 (padding). Row 1 is one plain
    sequence. ft's logits on A and B equal transformers run on each sequence alone, and
    transformers' own packed-sequence support (it finds the sequences where position_ids restart,
    when there is no attention mask and no cache) on the whole row."""

    LA, LB, PAD = 11, 9, 4

    def test_packed_equals_alone(self):
        for case in ("gqa_untied", "rope_llama3"):
            with self.subTest(case=case):
                self.check(case)

    def check(self, case):
        model_dir = random_model(case)
        la, lb, pad = self.LA, self.LB, self.PAD
        g = torch.Generator().manual_seed(7)
        ids = torch.randint(3, 512, (2, la + lb + pad), generator=g)
        pos = torch.stack([torch.cat([torch.arange(la), torch.arange(lb), torch.arange(pad)]),
                           torch.arange(la + lb + pad)])
        seg = torch.tensor([[0] * la + [1] * lb + [-1] * pad, [0] * (la + lb + pad)])
        hf = ic.load_hf(model_dir)
        hf64 = ic.load_hf(model_dir, "float64")

        def alone(model):  # A, B and row 1, each run alone, as one [la + lb + T] tensor
            return torch.cat([ic.hf_logits(model, ids[:1, :la])[0], ic.hf_logits(model, ids[:1, la:la + lb])[0],
                              ic.hf_logits(model, ids[1:])[0]])

        def valid(logits):  # ft's / packed rows in the same order, padding left out
            return torch.cat([logits[0, :la + lb], logits[1]])

        ref, ref64 = alone(hf), alone(hf64)
        hf_packed, hf_packed64 = ic.hf_logits(hf, ids, pos), ic.hf_logits(hf64, ids, pos)
        ic.report(f"{case} transformers packed (position_ids) vs alone", "logits", ic.max_abs_diff(valid(hf_packed), ref))
        for kernel in ("eager", "auto"):
            ft = ic.ft_logits(TMP.path, model_dir, ids, position_ids=pos, segment_ids=seg, attention=kernel)
            ic.check_fp32(self, f"{case} packed fp32 {kernel} ft vs transformers alone", valid(ft), ref, ref64)
            ic.check_fp32(self, f"{case} packed fp32 {kernel} ft vs transformers packed", valid(ft), valid(hf_packed),
                          valid(hf_packed64))
        # B attending to A (no segments: plain causal attention over the row) gives other logits,
        # so the comparison above saw the segment boundary.
        leaky = ic.hf_logits(hf, ids[:1])[0, la:la + lb]
        d_leak = ic.max_abs_diff(leaky, ref[la:la + lb])
        ic.report(f"{case} B attending to A (must be large)", "logits", d_leak)
        self.assertGreater(d_leak, 1000 * ic.FP32_TOL)


class Stories260K(unittest.TestCase):
    """The bundled real model (tied, GQA 8/4 heads, 5 layers)."""

    def test_stories260k(self):
        ids = torch.tensor(ic.stories_prompt_ids())
        ref = ic.hf_logits(ic.load_hf(ic.STORIES), ids)
        ref64 = ic.hf_logits(ic.load_hf(ic.STORIES, "float64"), ids)
        sdpa = ic.hf_logits(ic.load_hf_impl(ic.STORIES, "sdpa"), ids)
        ic.report("stories260K transformers' own sdpa vs eager (fp32 noise, for scale)", "logits",
                  ic.max_abs_diff(sdpa, ref))
        for kernel in ("eager", "auto"):
            ft = ic.ft_logits(TMP.path, ic.STORIES, ids, attention=kernel)
            ic.check_fp32(self, f"stories260K fp32 {kernel}", ft, ref, ref64)
        check_bf16(self, "stories260K", ic.STORIES, ids, None, ref)


if __name__ == "__main__":
    unittest.main()
