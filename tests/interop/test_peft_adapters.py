"""PEFT and ft read each other's LoRA adapters, with the same logits.

- FtTrainedAdapters: short ft_train LoRA runs on stories260K (q/v only; all-linear; rsLoRA;
  lora.init_from continuing the q/v run's adapter; a 2-rank ZeRO-2 run through ft_launch), each
  adapter loaded by PEFT's PeftModel.from_pretrained: PEFT holds exactly the file's tensors, its
  scaling is ft's, and its logits equal ft_logits --adapter's (fp32, interop_common.check_fp32).
- PeftSavedAdapters: adapters PEFT itself saves (get_peft_model, random non-zero A and B, fp32 and
  bf16 files, q/v, all attention, all-linear, every projection by list, a regex, rsLoRA): ft loads
  them with PEFT's logits.
- PeftFeaturesFtCannotUse: what PEFT saves that ft cannot apply is refused (non-zero exit) by an
  error that names the field.
- ModelTypeAdapters: ft_train LoRA adapters on random mistral (sliding window 8, shorter than the
  24-token rows) and qwen2 (non-zero q/k/v biases, frozen in the base) models load in PEFT with
  ft's logits; and a PEFT-saved adapter on each loads in ft with PEFT's.
"""
import os
import unittest

import interop_common as ic

torch = ic.init_torch()


def setUpModule():
    ic.quiet_warnings()
    global TMP, IDS
    TMP = ic.TempDir("peft")
    IDS = torch.tensor(ic.stories_prompt_ids())


def tearDownModule():
    TMP.close()


_base_logits = {}


def base_logits(base_dir):
    if base_dir not in _base_logits:
        _base_logits[base_dir] = ic.hf_logits(ic.load_hf(base_dir), IDS)
    return _base_logits[base_dir]


def lora_scalings(peft_model):
    """{module name: PEFT's scaling of the default adapter} for every LoRA module."""
    return {name: m.scaling["default"] for name, m in peft_model.named_modules()
            if hasattr(m, "scaling") and isinstance(m.scaling, dict) and "default" in m.scaling}


def check_adapter(test, case, adapter_dir, base_dir=ic.STORIES, expected_scaling=None):
    """PEFT loads the adapter (exactly the file's tensors, the expected scaling) and its logits equal
    ft's with the same adapter."""
    from peft import get_peft_model_state_dict
    file_tensors = ic.adapter_tensors(adapter_dir)
    model = ic.load_peft(base_dir, adapter_dir)
    loaded = get_peft_model_state_dict(model)
    test.assertEqual(sorted(loaded), sorted(file_tensors),
                     f"{case}: PEFT's adapter modules differ from the tensors in the file")
    for name, t in file_tensors.items():
        test.assertTrue(torch.equal(loaded[name].float(), t.float()), f"{case}: PEFT did not load {name} as saved")
    b_norm = min(float(t.float().abs().max()) for n, t in file_tensors.items() if ".lora_B." in n)
    test.assertGreater(b_norm, 0.0, f"{case}: a lora_B matrix is all zeros (the adapter changes nothing)")
    scalings = lora_scalings(model)
    test.assertEqual(len(scalings), len(file_tensors) // 2, f"{case}: PEFT's LoRA modules {sorted(scalings)}")
    if expected_scaling is not None:
        for name, value in scalings.items():
            test.assertAlmostEqual(value, expected_scaling, places=12, msg=f"{case}: PEFT's scaling of {name}")
    ref = ic.hf_logits(model, IDS)
    ref64 = ic.hf_logits(ic.load_peft(base_dir, adapter_dir, "float64"), IDS)
    ft = ic.ft_logits(TMP.path, base_dir, IDS, adapter=adapter_dir)
    ic.check_fp32(test, f"{case} fp32 ft vs PEFT", ft, ref, ref64)
    effect = ic.max_abs_diff(ref, base_logits(base_dir))
    ic.report(f"{case} adapter's effect on the logits (must be large)", "logits", effect)
    test.assertGreater(effect, 100 * ic.FP32_TOL, f"{case}: the adapter hardly moves the logits; the test cannot see it")


class FtTrainedAdapters(unittest.TestCase):
    """Adapters written by ft_train (3 steps of 4 sequences, lr 1e-2: B is non-zero)."""

    @classmethod
    def setUpClass(cls):
        cls.dir = ic.class_temp_dir(cls, "peft_runs")
        cls.dataset = ic.write_small_dataset(cls.dir.file("small.jsonl"))
        cls.runs = {}

    @classmethod
    def run_dir(cls, name):
        """The run folder of run `name`, trained on first use."""
        if name not in cls.runs:
            lora, ranks, strategy, micro, seed = None, 1, "ddp", 2, 42
            if name == "qv":  # the default targets, q_proj and v_proj
                lora = {"r": 4, "alpha": 8, "dropout": 0.05}
            elif name == "all_linear":
                lora = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": "all-linear"}
            elif name == "rslora":
                lora = {"r": 4, "alpha": 8, "dropout": 0.0, "use_rslora": True,
                        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}
            elif name == "init_from":
                # r, alpha and targets come from the adapter continued (r 4, alpha 8), not from
                # the config's defaults (r 8, alpha 16): the written adapter must say so.
                lora = {"init_from": os.path.join(cls.run_dir("qv"), "adapter")}
                seed = 7
            elif name == "zero2_2ranks":
                lora = {"r": 4, "alpha": 8, "dropout": 0.05, "target_modules": "all-linear"}
                ranks, strategy, micro = 2, "zero2", 1
            run = cls.dir.file(name)
            config = ic.train_config(run, cls.dataset, lora=lora, strategy=strategy, micro_batch=micro, seed=seed)
            ic.run_train(config, cls.dir.file(name + ".json"), ranks=ranks)
            cls.runs[name] = run
        return cls.runs[name]

    def adapter(self, name):
        path = os.path.join(self.run_dir(name), "adapter")
        self.assertTrue(os.path.isfile(os.path.join(path, "adapter_model.safetensors")), f"{name}: no adapter written")
        return path

    def test_q_v_only(self):
        path = self.adapter("qv")
        self.assertEqual(sorted(ic.read_json(os.path.join(path, "adapter_config.json"))["target_modules"]),
                         ["q_proj", "v_proj"])
        check_adapter(self, "ft_train q/v", path, expected_scaling=8 / 4)

    def test_all_linear(self):
        path = self.adapter("all_linear")
        self.assertEqual(len(ic.adapter_tensors(path)), 2 * 7 * 5, "all-linear: 7 projections x 5 layers x A, B")
        check_adapter(self, "ft_train all-linear", path, expected_scaling=8 / 4)

    def test_rslora(self):
        path = self.adapter("rslora")
        self.assertIs(ic.read_json(os.path.join(path, "adapter_config.json"))["use_rslora"], True)
        check_adapter(self, "ft_train rsLoRA", path, expected_scaling=8 / 4 ** 0.5)

    def test_init_from_continuation(self):
        path = self.adapter("init_from")
        config = ic.read_json(os.path.join(path, "adapter_config.json"))
        self.assertEqual((config["r"], config["lora_alpha"]), (4, 8), "the continued adapter's r and alpha")
        before = ic.adapter_tensors(self.adapter("qv"))
        after = ic.adapter_tensors(path)
        self.assertEqual(sorted(before), sorted(after))
        moved = max(ic.max_abs_diff(before[k], after[k]) for k in before)
        ic.report("ft_train init_from: weights moved by the continued training", "adapter", moved)
        self.assertGreater(moved, 0.0, "the continued run did not train")
        check_adapter(self, "ft_train init_from", path, expected_scaling=8 / 4)

    def test_zero2_two_ranks(self):
        check_adapter(self, "ft_launch 2 ranks zero2", self.adapter("zero2_2ranks"), expected_scaling=8 / 4)


class PeftSavedAdapters(unittest.TestCase):
    """Adapters PEFT saves for stories260K, loaded by ft."""

    @classmethod
    def setUpClass(cls):
        cls.dir = ic.class_temp_dir(cls, "peft_saved")

    def check(self, case, seed, save_dtype="float32", expected_scaling=None, **lora):
        path = ic.make_peft_adapter(ic.STORIES, self.dir.file(case), seed, save_dtype=save_dtype, **lora)
        want = {"float32": "F32", "bfloat16": "BF16"}[save_dtype]
        dtypes = set(ic.adapter_dtypes(path).values())
        self.assertEqual(dtypes, {want}, f"{case}: PEFT saved {dtypes}")
        check_adapter(self, f"PEFT-saved {case}", path, expected_scaling=expected_scaling)
        return path

    def test_q_v(self):
        for dtype in ("float32", "bfloat16"):
            self.check(f"q_v_{dtype}", 1, dtype, 8 / 4, r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])

    def test_all_attention(self):
        for dtype in ("float32", "bfloat16"):
            self.check(f"attention_{dtype}", 2, dtype, 16 / 8, r=8, lora_alpha=16,
                       target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])

    def test_all_linear(self):
        for dtype in ("float32", "bfloat16"):
            path = self.check(f"all_linear_{dtype}", 3, dtype, 8 / 2, r=2, lora_alpha=8, target_modules="all-linear")
            self.assertEqual(len(ic.adapter_tensors(path)), 2 * 7 * 5)

    def test_every_projection_listed(self):
        self.check("every_projection_float32", 4, "float32", 4 / 4, r=4, lora_alpha=4,
                   target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])

    def test_regex_targets(self):
        # PEFT full-matches a string target against module names: layer 1's MLP only.
        path = self.check("regex_float32", 5, "float32", 8 / 4, r=4, lora_alpha=8,
                          target_modules=r"model\.layers\.1\.mlp\.(gate|up|down)_proj")
        self.assertEqual(len(ic.adapter_tensors(path)), 2 * 3)

    def test_rslora(self):
        self.check("rslora_float32", 6, "float32", 4 / 8 ** 0.5, r=8, lora_alpha=4, use_rslora=True,
                   target_modules=["q_proj", "v_proj", "down_proj"])


class ModelTypeAdapters(unittest.TestCase):
    """mistral and qwen2 bases made by transformers (2 layers, GQA), adapters both ways."""

    BASES = {"mistral": (61, dict(model_type="mistral", extra={"sliding_window": 8})),
             "qwen2": (62, dict(model_type="qwen2"))}

    @classmethod
    def setUpClass(cls):
        cls.dir = ic.class_temp_dir(cls, "peft_types")
        cls.dataset = ic.write_small_dataset(cls.dir.file("small.jsonl"))
        cls.bases = {}

    @classmethod
    def base(cls, model_type):
        if model_type not in cls.bases:
            seed, kwargs = cls.BASES[model_type]
            cls.bases[model_type] = ic.make_random_llama(cls.dir.file("base_" + model_type), seed, **kwargs)
        return cls.bases[model_type]

    def ft_trained(self, model_type):
        base = self.base(model_type)
        run = self.dir.file("run_" + model_type)
        lora = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": "all-linear"}
        ic.run_train(ic.train_config(run, self.dataset, model=base, lora=lora), self.dir.file(model_type + ".json"))
        adapter = os.path.join(run, "adapter")
        self.assertEqual(len(ic.adapter_tensors(adapter)), 2 * 7 * 2, "all-linear: 7 projections x 2 layers x A, B")
        self.assertFalse([k for k in ic.adapter_tensors(adapter) if k.endswith(".bias")], "biases stay in the base")
        check_adapter(self, f"ft_train {model_type}", adapter, base_dir=base, expected_scaling=8 / 4)

    def peft_saved(self, model_type):
        base = self.base(model_type)
        path = ic.make_peft_adapter(base, self.dir.file("peft_" + model_type), 63, r=4, lora_alpha=8,
                                    target_modules=["q_proj", "k_proj", "v_proj", "down_proj"])
        check_adapter(self, f"PEFT-saved {model_type}", path, base_dir=base, expected_scaling=8 / 4)

    def test_mistral_ft_trained(self):
        self.ft_trained("mistral")

    def test_qwen2_ft_trained(self):
        self.ft_trained("qwen2")

    def test_mistral_peft_saved(self):
        self.peft_saved("mistral")

    def test_qwen2_peft_saved(self):
        self.peft_saved("qwen2")


class PeftFeaturesFtCannotUse(unittest.TestCase):
    """An adapter using a PEFT feature ft does not implement must be refused, naming the field:
    applying it as plain LoRA would give other outputs than PEFT's. Where ft accepts one, the test
    fails saying so and how far ft's logits are from PEFT's."""

    @classmethod
    def setUpClass(cls):
        cls.dir = ic.class_temp_dir(cls, "peft_refused")
        # An untied random model, so modules_to_save can name lm_head.
        cls.base = ic.make_random_llama(cls.dir.file("base"), 77, tie=False)

    def check_refused(self, case, names, **lora):
        # A folder name that names no field: the error message quotes the path.
        path = ic.make_peft_adapter(self.base, self.dir.file(f"adapter{len(os.listdir(self.dir.path))}"), 11, r=2,
                                    lora_alpha=4, **lora)
        result = ic.ft_logits(TMP.path, self.base, IDS, adapter=path, expect_ok=False)
        if isinstance(result, torch.Tensor):
            d = ic.max_abs_diff(result, ic.hf_logits(ic.load_peft(self.base, path), IDS))
            ic.report(f"refusal {case}: ACCEPTED, ft vs PEFT", "logits", d)
            self.fail(f"ft accepted a PEFT adapter with {lora} (ft_logits --adapter exited 0) and applied it "
                      f"as plain LoRA: its logits differ from PEFT's by {d:.3g}. lib/io/peft_adapter.cpp should "
                      f"refuse {names[0]}.")
        message = result.stderr.strip().replace(path, "ADAPTER")  # only ft's words may name the field
        print(f"refusal {case}: exit {result.returncode}: {message.splitlines()[-1] if message else ''}", flush=True)
        self.assertEqual(result.returncode, 1, f"{case}: expected ft's bad-input exit code 1:\n{message}")
        self.assertTrue(any(n in message for n in names),
                        f"{case}: ft refused the adapter, but its error does not name {' or '.join(names)}:\n{message}")

    # The list.
    def test_modules_to_save(self):
        self.check_refused("modules_to_save", ["modules_to_save"], target_modules=["q_proj"], modules_to_save=["lm_head"])

    def test_layers_to_transform(self):
        self.check_refused("layers_to_transform", ["layers_to_transform"], target_modules=["q_proj", "v_proj"],
                           layers_to_transform=[0])

    def test_use_dora(self):
        self.check_refused("use_dora", ["use_dora"], target_modules=["q_proj"], use_dora=True)

    def test_bias_all(self):
        self.check_refused("bias_all", ["bias"], target_modules=["q_proj"], bias="all")

    def test_bias_lora_only(self):
        self.check_refused("bias_lora_only", ["bias"], target_modules=["q_proj"], bias="lora_only")

    # More of LoraConfig that changes what the adapter computes.
    def test_rank_pattern(self):
        self.check_refused("rank_pattern", ["rank_pattern"], target_modules=["q_proj", "v_proj"],
                           rank_pattern={"v_proj": 1})

    def test_alpha_pattern(self):
        self.check_refused("alpha_pattern", ["alpha_pattern"], target_modules=["q_proj", "v_proj"],
                           alpha_pattern={"v_proj": 3})

    def test_lora_bias(self):
        self.check_refused("lora_bias", ["lora_bias"], target_modules=["q_proj"], lora_bias=True)

    def test_exclude_modules(self):
        self.check_refused("exclude_modules", ["exclude_modules"], target_modules=["q_proj"],
                           exclude_modules=["model.layers.0.self_attn.q_proj"])

    def test_trainable_token_indices(self):
        # Saved as an extra tensor (...embed_tokens.token_adapter.trainable_tokens_delta).
        self.check_refused("trainable_token_indices", ["trainable_token_indices", "trainable_tokens"],
                           target_modules=["q_proj"], trainable_token_indices=[3, 4])

    def test_kasa(self):
        from peft.tuners.lora.config import KasaConfig
        # Saved with a lora_diag tensor per module (and PEFT truncates the base's singular values).
        self.check_refused("kasa_config", ["kasa_config", "lora_diag"], target_modules=["q_proj"],
                           kasa_config=KasaConfig())

    def test_alora_invocation_tokens(self):
        # Activated LoRA: the adapter acts only from the invocation tokens on.
        self.check_refused("alora_invocation_tokens", ["alora_invocation_tokens"], target_modules=["q_proj"],
                           alora_invocation_tokens=IDS[0, 3:5].tolist())

    def test_layer_replication_reordered(self):
        # PEFT runs the base's layers in the order [1, 0], each with its own adapter.
        self.check_refused("layer_replication_reordered", ["layer_replication"], target_modules=["q_proj"],
                           layer_replication=[[1, 2], [0, 1]])

    def test_layer_replication_stacked(self):
        # PEFT runs layers [0, 1, 1] (3 layers, the adapter has tensors for layer 2).
        self.check_refused("layer_replication_stacked", ["layer_replication"], target_modules=["q_proj"],
                           layer_replication=[[0, 2], [1, 2]])

    def test_use_bdlora(self):
        from peft.tuners.lora.config import BdLoraConfig
        # Block-diagonal A or B, saved as the blocks only.
        self.check_refused("use_bdlora", ["use_bdlora"], target_modules=["q_proj", "o_proj"],
                           use_bdlora=BdLoraConfig(target_modules_bd_a=["o_proj"], target_modules_bd_b=["q_proj"],
                                                   nblocks=2))

    def test_target_parameters(self):
        # LoRA on a parameter instead of a module; PEFT saves target_modules as [].
        self.check_refused("target_parameters", ["target_parameters"], target_modules=[],
                           target_parameters=["self_attn.q_proj.weight"])


if __name__ == "__main__":
    unittest.main()
