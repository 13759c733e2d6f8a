"""ft_train started by PyTorch's own torchrun (the pinned pip torch's), as users start it.

Every run trains the tiny stories260K model fully (zero2, fp32) for 12 steps with a checkpoint
every 3, and is compared with the same run started by ft_launch:
- torchrun with --master_port (static rendezvous), --standalone and --rdzv-backend c10d: the
  same losses, evaluation and weights, bit for bit (same program, same world);
- 2 ranks under torchrun = 1 rank (twice the accumulation), to rounding;
- --max-restarts 1 with rank 1 killed after a checkpoint on the first start: torchrun restarts
  every worker, ft_train continues from the checkpoint, and the run ends bit-identical.

On a LibTorch 1.x build, ft cannot use torchrun's agent store (a PyTorch 2.x store): the static
rendezvous must be refused at once with the way out, and --standalone / c10d work with
TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (rank 0 hosts the store, as under ft_launch).
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

from safetensors.torch import load_file

ROOT = os.environ.get("FT_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("FT_BIN_DIR") or os.path.join(ROOT, "build", "bin")
TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")
LIBTORCH = os.environ.get("FT_LIBTORCH_VERSION", "")
OLD_LIBTORCH = LIBTORCH.startswith("1.")
STEPS = 12


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def small_dataset(folder):
    with open(os.path.join(ROOT, "tests", "data", "datasets", "alpaca_train.json")) as f:
        records = json.load(f)[:40]
    path = os.path.join(folder, "small.jsonl")
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    return path


class Run:
    """A run folder with its config (the shape of tests/train/training_runs.h's zero2 full run)."""

    def __init__(self, parent, name, dataset):
        self.dir = os.path.join(parent, name)
        os.makedirs(self.dir)
        self.run_dir = os.path.join(self.dir, "run")
        self.config = os.path.join(self.dir, "config.json")
        data = os.path.join(ROOT, "tests", "data")
        config = {
            "run_dir": self.run_dir,
            "model": {"path": os.path.join(data, "stories260K")},
            "data": {"train": dataset, "eval": os.path.join(data, "datasets", "alpaca_eval.jsonl"), "max_seq_len": 64,
                     "template": {"base": "alpaca", "prompt": "{instruction}\n",
                                  "prompt_with_input": "{instruction}\n{input}\n"}},
            "parallel": {"strategy": "zero2", "timeout_s": 60, "bucket_mb": 0.05},
            "train": {"global_batch_size": 8, "micro_batch_size": 2, "epochs": 3, "lr": 1e-3, "warmup_steps": 2,
                      "adam_eps": 1e-2, "weight_decay": 0.1, "threads": 1},
            "checkpoint": {"every_steps": 3, "keep_last": 100},
            "log": {"every_steps": 1},
        }
        with open(self.config, "w") as f:
            json.dump(config, f, indent=2)

    def run(self, command, env=None, timeout=300):
        full_env = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
        p = subprocess.run(command, cwd=self.dir, env=full_env, capture_output=True, text=True, timeout=timeout)
        self.output = p.stdout + p.stderr
        return p.returncode

    def losses(self):
        out, eval_loss = [], None
        with open(os.path.join(self.run_dir, "metrics.jsonl")) as f:
            for line in f:
                m = json.loads(line)
                if "loss" in m:
                    out.append(m["loss"])
                if "eval_loss" in m:
                    eval_loss = m["eval_loss"]
        return out, eval_loss

    def weights(self):
        return load_file(os.path.join(self.run_dir, "model", "model.safetensors"))


def torchrun(*args):
    return [TORCHRUN, "--nproc_per_node", "2", *args, "--no-python", os.path.join(BIN, "ft_train")]


class Torchrun(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ft_torchrun_")
        cls.dataset = small_dataset(cls.tmp)
        cls.reference = Run(cls.tmp, "ft_launch", cls.dataset)
        code = cls.reference.run([os.path.join(BIN, "ft_launch"), "--nproc_per_node", "2",
                                  os.path.join(BIN, "ft_train"), cls.reference.config])
        assert code == 0, cls.reference.output
        cls.ref_losses, cls.ref_eval = cls.reference.losses()
        cls.ref_weights = cls.reference.weights()
        assert len(cls.ref_losses) == STEPS, cls.ref_losses

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def new_run(self, name):
        return Run(self.tmp, name, self.dataset)

    def assert_identical(self, run):
        losses, eval_loss = run.losses()
        self.assertEqual(losses, self.ref_losses, run.output[-3000:])
        self.assertEqual(eval_loss, self.ref_eval)
        weights = run.weights()
        self.assertEqual(sorted(weights), sorted(self.ref_weights))
        for name, tensor in self.ref_weights.items():
            self.assertTrue(bool((weights[name] == tensor).all()), name)

    def agent_store_env(self):
        # A LibTorch 1.x ft cannot talk to torchrun's (2.x) agent store: rank 0 hosts its own.
        return {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"} if OLD_LIBTORCH else {}

    def test_static_rendezvous_with_master_port(self):
        run = self.new_run("static")
        code = run.run(torchrun("--master_port", str(free_port())) + [run.config])
        if OLD_LIBTORCH:
            self.assertNotEqual(code, 0)
            self.assertIn("whose store client cannot talk to a PyTorch 2.x store", run.output)
            self.assertIn("TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --standalone", run.output)
            return
        self.assertEqual(code, 0, run.output[-3000:])
        self.assertIn("torchrun's agent store", run.output)  # the rank environment ft read
        self.assert_identical(run)

    def test_standalone(self):
        run = self.new_run("standalone")
        code = run.run(torchrun("--standalone") + [run.config], env=self.agent_store_env())
        self.assertEqual(code, 0, run.output[-3000:])
        self.assert_identical(run)

    def test_c10d_rendezvous_backend(self):
        run = self.new_run("c10d")
        code = run.run(torchrun("--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
                                "--rdzv-id", "ft-interop") + [run.config], env=self.agent_store_env())
        self.assertEqual(code, 0, run.output[-3000:])
        self.assert_identical(run)

    def test_two_ranks_equal_one_rank(self):
        one = self.new_run("one_rank")
        self.assertEqual(one.run([os.path.join(BIN, "ft_train"), one.config]), 0, one.output[-3000:])
        two = self.new_run("two_ranks")
        code = two.run(torchrun("--standalone") + [two.config], env=self.agent_store_env())
        self.assertEqual(code, 0, two.output[-3000:])
        (l1, e1), (l2, e2) = one.losses(), two.losses()
        self.assertEqual(len(l1), STEPS)
        loss_gap = max(abs(a - b) / abs(a) for a, b in zip(l1, l2))
        w1, w2 = one.weights(), two.weights()
        weight_gap = max(float((w1[n] - w2[n]).norm() / (w1[n].norm() + 1e-12)) for n in w1)
        print(f"torchrun 2 ranks vs 1 rank: max relative loss gap {loss_gap:.3g}, eval {abs(e1 - e2) / e1:.3g}, "
              f"max relative weight gap {weight_gap:.3g}")
        self.assertLess(loss_gap, 1e-5)
        self.assertLess(abs(e1 - e2) / e1, 1e-5)
        self.assertLess(weight_gap, 1e-4)

    def test_max_restarts_continue_from_the_checkpoint(self):
        run = self.new_run("restart")
        # Rank 1 is killed at its 5th step, on the first start only (after the checkpoint at step 3).
        script = ('if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then export FT_FAULT=step.done:5@1; fi; exec "$0" "$@"')
        command = [TORCHRUN, "--nproc_per_node", "2", "--standalone", "--max-restarts", "1", "--no-python",
                   "/bin/sh", "-c", script, os.path.join(BIN, "ft_train"), run.config]
        code = run.run(command, env=self.agent_store_env())
        self.assertEqual(code, 0, run.output[-4000:])
        self.assertIn("restart 1", run.output)  # ft's rank environment line on the second start
        self.assertIn("step_000003", run.output)
        self.assert_identical(run)


if __name__ == "__main__":
    unittest.main()
