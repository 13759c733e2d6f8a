#!/usr/bin/env python3
"""Multi-node runs over real TCP between two "nodes": network namespaces joined by a veth pair.

Node A (10.213.0.1) and node B (10.213.0.2) see the same files (a namespace separates the network
only), so the run folder is shared as it would be on a cluster's shared file system. Each node also
has a second interface (10.212.0.x) that reaches nobody, made before the one between the nodes.

- ft_launch --nnodes 2 --nproc_per_node 2 on each node trains the tiny model on 4 ranks with the
  same losses and the same adapter, bit for bit, as 4 ranks on one node; no GLOO_SOCKET_IFNAME is
  set: each rank binds to the address that routes to MASTER_ADDR;
- the same through torchrun's c10d rendezvous (the pinned torchrun of .venv/; skipped without it);
- GLOO_SOCKET_IFNAME still wins: pointed at node B's interface that reaches nobody, node B's ranks
  advertise an address node A cannot reach, and node A's ranks stop naming them and that address;
- node B's link set down in the middle of the run: every surviving rank stops with an error
  within parallel.timeout_s, no process is left behind, and the last complete checkpoint resumes
  on one node (4 ranks -> 2);
- the same under ft_launch --max-restarts: the launchers meet again, and once the link is back up
  node B rejoins and the run resumes from the latest checkpoint on both nodes, ending with every
  step's loss and the adapter of the uninterrupted run;
- node B's processes all killed at once: node A's ranks stop, naming node B's ranks;
- node A unreachable at start: node B's ranks stop after parallel.timeout_s naming its address and
  port;
- the rendezvous store of a one-node run (MASTER_ADDR=127.0.0.1) cannot be reached from another
  host (LibTorch 2.x: it listens on 127.0.0.1 only; 1.13's listens everywhere: skipped there);
- a world split over two launches whose MASTER_ADDR is 127.0.0.1 is an error naming the loopback
  address and GLOO_SOCKET_IFNAME (no namespace needed).

Needs root and `ip` (iproute2) for the namespaces; without them those cases report themselves
skipped. Every namespace this file makes is deleted at the end, also after a failure or a
SIGTERM (ctest's timeout), and with it the veth pair and every process still running in it.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.environ.get("FT_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("FT_BIN_DIR") or os.path.join(ROOT, "build", "bin")
LIBTORCH = os.environ.get("FT_LIBTORCH_VERSION", "")
TIMEOUT_S = 15  # parallel.timeout_s of the fault cases
NODE_A, NODE_B = "10.213.0.1", "10.213.0.2"
# An interface on each node that reaches nobody. Gloo connects each pair from the higher address to
# the lower one, so the lower subnet: a wrong address there is one that the peer must connect to.
DUMMY_A, DUMMY_B = "10.212.0.1", "10.212.0.2"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def popen_logged(command, env, log):
    """Starts command with its stdout and stderr going to the file log."""
    with open(log, "w") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def namespaces_unavailable():
    if os.geteuid() != 0:
        return "not root: network namespaces need it"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    probe = f"ftprobe{os.getpid()}"
    p = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if p.returncode != 0:
        return "cannot make a network namespace: " + p.stderr.strip()
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


class TwoNodes:
    """Two namespaces joined by a veth pair; node B has a dummy interface too."""

    def __init__(self):
        tag = f"{os.getpid() % 100000}"
        self.a, self.b = f"ft{tag}a", f"ft{tag}b"
        self.link_a, self.link_b = f"ft{tag}va", f"ft{tag}vb"
        self.made = []

    def ip(self, *args):
        p = subprocess.run(["ip", *args], capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"ip {' '.join(args)}: {p.stderr.strip()}")

    def __enter__(self):
        try:
            for ns in (self.a, self.b):
                self.ip("netns", "add", ns)
                self.made.append(ns)
                self.ip("-n", ns, "link", "set", "lo", "up")
            # The dummy first: an interface-order guess would take it.
            # (A veth pair with both ends in the node: this kernel may have no dummy interfaces.)
            for ns, address in ((self.a, DUMMY_A), (self.b, DUMMY_B)):
                self.ip("-n", ns, "link", "add", "ftdummy", "type", "veth", "peer", "name", "ftdummyend")
                self.ip("-n", ns, "addr", "add", address + "/24", "dev", "ftdummy")
                self.ip("-n", ns, "link", "set", "ftdummy", "up")
                self.ip("-n", ns, "link", "set", "ftdummyend", "up")
            self.ip("link", "add", self.link_a, "netns", self.a, "type", "veth", "peer", "name", self.link_b,
                    "netns", self.b)
            self.ip("-n", self.a, "addr", "add", NODE_A + "/24", "dev", self.link_a)
            self.ip("-n", self.b, "addr", "add", NODE_B + "/24", "dev", self.link_b)
            self.ip("-n", self.a, "link", "set", self.link_a, "up")
            self.ip("-n", self.b, "link", "set", self.link_b, "up")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        for ns in reversed(self.made):
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)  # takes the veth pair with it
        self.made = []

    def start(self, ns, command, env, log):
        """A process in namespace ns, its output (stdout and stderr) to the file log."""
        return popen_logged(["ip", "netns", "exec", ns, *command], env, log)


class Run:
    """A run folder and config: LoRA on the tiny stories260K model, 4 ranks x micro-batch 2."""

    def __init__(self, parent, name, steps_per_checkpoint=0, epochs=1, timeout_s=60):
        self.dir = os.path.join(parent, name)
        os.makedirs(self.dir)
        self.run_dir = os.path.join(self.dir, "run")
        self.config = os.path.join(self.dir, "config.json")
        data = os.path.join(ROOT, "tests", "data")
        config = {
            "run_dir": self.run_dir,
            "model": {"path": os.path.join(data, "stories260K")},
            "data": {"train": os.path.join(data, "datasets", "alpaca_train.json"),
                     "eval": os.path.join(data, "datasets", "alpaca_eval.jsonl"), "max_seq_len": 64,
                     "template": {"base": "alpaca", "prompt": "{instruction}\n",
                                  "prompt_with_input": "{instruction}\n{input}\n"}},
            "lora": {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]},
            "parallel": {"timeout_s": timeout_s},
            "train": {"global_batch_size": 8, "micro_batch_size": 2, "epochs": epochs, "lr": 3e-3,
                      "warmup_steps": 2, "threads": 1, "max_steps": 12},
            "checkpoint": {"every_steps": steps_per_checkpoint, "keep_last": 100},
            "log": {"every_steps": 1},
        }
        with open(self.config, "w") as f:
            json.dump(config, f, indent=2)

    def losses(self):
        out = []
        with open(os.path.join(self.run_dir, "metrics.jsonl")) as f:
            for line in f:
                m = json.loads(line)
                if "loss" in m:
                    out.append(m["loss"])
        return out

    def losses_by_step(self):
        """{step: loss}, the last entry of each step (a step redone after a restart is logged again)."""
        out = {}
        with open(os.path.join(self.run_dir, "metrics.jsonl")) as f:
            for line in f:
                m = json.loads(line)
                if "loss" in m and "step" in m:
                    out[m["step"]] = m["loss"]
        return out

    def adapter(self):
        with open(os.path.join(self.run_dir, "adapter", "adapter_model.safetensors"), "rb") as f:
            return f.read()


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", **extra)
    return env


def launch(nodes, node_rank, master_port, run, extra=()):
    return [os.path.join(BIN, "ft_launch"), "--nnodes", "2", "--node_rank", str(node_rank), "--master_addr", NODE_A,
            "--master_port", str(master_port), "--nproc_per_node", "2", *extra, os.path.join(BIN, "ft_train"),
            run.config]


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def wait_all(processes, timeout):
    deadline = time.monotonic() + timeout
    codes = []
    for p in processes:
        try:
            codes.append(p.wait(timeout=max(deadline - time.monotonic(), 0.1)))
        except subprocess.TimeoutExpired:
            codes.append(None)
    return codes


class LoopbackMaster(unittest.TestCase):
    """No namespaces: two launches on this host that claim to be two nodes."""

    def test_loopback_master_addr_is_an_error_across_nodes(self):
        tmp = tempfile.mkdtemp(prefix="ft_netns_")
        try:
            run = Run(tmp, "loopback", timeout_s=30)
            port = free_port()
            env = clean_env()
            logs = [os.path.join(tmp, f"node{i}.log") for i in range(2)]
            procs = [popen_logged([os.path.join(BIN, "ft_launch"), "--nnodes", "2", "--node_rank", str(i),
                                   "--master_addr", "127.0.0.1", "--master_port", str(port), "--nproc_per_node", "1",
                                   os.path.join(BIN, "ft_train"), run.config], env, logs[i])
                     for i in range(2)]
            codes = wait_all(procs, 120)
            for p in procs:
                if p.poll() is None:
                    p.kill()
            output = read(logs[0]) + read(logs[1])
            self.assertTrue(all(c not in (0, None) for c in codes), f"{codes}\n{output[-3000:]}")
            self.assertIn("through its loopback address 127.0.0.1", output, output[-3000:])
            self.assertIn("GLOO_SOCKET_IFNAME", output)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


class MultiNode(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        why = namespaces_unavailable()
        if why:
            raise unittest.SkipTest(why)
        cls.tmp = tempfile.mkdtemp(prefix="ft_netns_")
        # The reference: the same run on 4 ranks of one node (the host's own loopback).
        cls.reference = Run(cls.tmp, "one_node")
        p = subprocess.run([os.path.join(BIN, "ft_launch"), "--nproc_per_node", "4", os.path.join(BIN, "ft_train"),
                            cls.reference.config], env=clean_env(), capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_two_nodes(self, nodes, run, env_b=None, timeout=600):
        port = free_port()
        logs = [os.path.join(run.dir, f"node{i}.log") for i in range(2)]
        procs = [nodes.start(nodes.a, launch(nodes, 0, port, run), clean_env(), logs[0]),
                 nodes.start(nodes.b, launch(nodes, 1, port, run), clean_env(**(env_b or {})), logs[1])]
        start = time.monotonic()
        codes = wait_all(procs, timeout)
        return codes, time.monotonic() - start, read(logs[0]), read(logs[1])

    def test_four_ranks_on_two_nodes_equal_four_on_one(self):
        with TwoNodes() as nodes:
            run = Run(self.tmp, "two_nodes")
            codes, seconds, out_a, out_b = self.run_two_nodes(nodes, run)
            self.assertEqual(codes, [0, 0], out_a[-3000:] + out_b[-3000:])
        self.assertEqual(run.losses(), self.reference.losses())
        self.assertEqual(run.adapter(), self.reference.adapter())
        print(f"two nodes x 2 ranks: {seconds:.1f} s", file=sys.stderr)

    def test_torchrun_c10d_rendezvous_on_two_nodes_equals_four_on_one(self):
        torchrun = os.path.join(ROOT, ".venv", "bin", "torchrun")
        if not os.path.exists(torchrun):
            self.skipTest("no torchrun in .venv/ (scripts/setup.sh --libtorch pip installs it)")
        # torchrun's agent on node 0 hosts the rendezvous store when told so (it cannot tell that
        # 10.213.0.1 is its own: the namespaces share the host name); --local-addr is what each
        # node's agent advertises. A LibTorch 1.x ft cannot use the 2.x agent store: rank 0 hosts its own.
        env = clean_env(**({"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"} if LIBTORCH.startswith("1.") else {}))
        with TwoNodes() as nodes:
            run = Run(self.tmp, "torchrun")
            port = free_port()
            logs = [os.path.join(run.dir, f"node{i}.log") for i in range(2)]
            procs = [nodes.start(ns, [torchrun, "--nnodes", "2", "--nproc_per_node", "2", "--rdzv-backend", "c10d",
                                      "--rdzv-endpoint", f"{NODE_A}:{port}", "--rdzv-id", "netns",
                                      "--rdzv-conf", f"is_host={'true' if i == 0 else 'false'}", "--local-addr",
                                      address, "--no-python", os.path.join(BIN, "ft_train"), run.config], env, logs[i])
                     for i, (ns, address) in enumerate(((nodes.a, NODE_A), (nodes.b, NODE_B)))]
            codes = wait_all(procs, 600)
            self.assertEqual(codes, [0, 0], read(logs[0])[-3000:] + read(logs[1])[-3000:])
        self.assertEqual(run.losses(), self.reference.losses())
        self.assertEqual(run.adapter(), self.reference.adapter())

    def test_gloo_socket_ifname_still_wins(self):
        with TwoNodes() as nodes:
            run = Run(self.tmp, "dummy_interface", timeout_s=TIMEOUT_S)
            codes, seconds, out_a, out_b = self.run_two_nodes(nodes, run, env_b={"GLOO_SOCKET_IFNAME": "ftdummy"},
                                                              timeout=4 * TIMEOUT_S + 60)
            output = out_a + out_b
            self.assertTrue(all(c not in (0, None) for c in codes), f"{codes}\n{output[-3000:]}")
            self.assertIn(f"cannot reach ranks 2, 3 at {DUMMY_B} (interface ftdummy from GLOO_SOCKET_IFNAME)", out_a,
                          out_a[-3000:])
            self.assertIn("interface ftdummy from GLOO_SOCKET_IFNAME", out_b, out_b[-3000:])
            print(f"GLOO_SOCKET_IFNAME=ftdummy on node B: both nodes stopped after {seconds:.1f} s", file=sys.stderr)

    def start_until_first_checkpoint(self, nodes, name, extra=()):
        """Both nodes training a run that checkpoints every 2 steps, once its first one is complete."""
        run = Run(self.tmp, name, steps_per_checkpoint=2, timeout_s=TIMEOUT_S)
        port = free_port()
        logs = [os.path.join(run.dir, f"node{i}.log") for i in range(2)]
        procs = [nodes.start(nodes.a, launch(nodes, 0, port, run, extra), clean_env(), logs[0]),
                 nodes.start(nodes.b, launch(nodes, 1, port, run, extra), clean_env(), logs[1])]
        latest = os.path.join(run.run_dir, "checkpoints", "latest")
        deadline = time.monotonic() + 300
        while not os.path.exists(latest) and time.monotonic() < deadline and procs[0].poll() is None:
            time.sleep(0.05)
        self.assertTrue(os.path.exists(latest), read(logs[0])[-3000:])
        return run, procs, logs

    def assert_both_nodes_stop(self, nodes, procs, logs, fault):
        """Every launcher exits non-zero within parallel.timeout_s (plus ft_launch's grace period to
        stop its other rank) of the fault, leaving no process behind on node A."""
        start = time.monotonic()
        codes = wait_all(procs, 4 * TIMEOUT_S + 60)
        seconds = time.monotonic() - start
        out_a, out_b = read(logs[0]), read(logs[1])
        self.assertTrue(all(c not in (0, None) for c in codes), f"{codes}\n{out_a[-3000:]}\n{out_b[-3000:]}")
        self.assertLess(seconds, 2 * TIMEOUT_S + 30, out_a[-3000:])
        left = subprocess.run(["ip", "netns", "pids", nodes.a], capture_output=True, text=True).stdout.split()
        self.assertEqual(left, [], "processes left in node A")
        # Node A's ranks name the ranks of node B that stopped answering.
        self.assertRegex(out_a, r"error: .*rank [23]( on host \S+)? has sent no heartbeat", out_a[-3000:])
        print(f"{fault} -> both nodes' launchers exited after {seconds:.1f} s (timeout_s {TIMEOUT_S})",
              file=sys.stderr)
        for name, out in (("node A", out_a), ("node B", out_b)):
            errors = [line for line in out.splitlines() if "error:" in line]
            print(f"  {name}: {errors[0] if errors else '(no error line)'}", file=sys.stderr)

    def test_link_down_stops_every_rank_and_the_checkpoint_resumes_on_one_node(self):
        with TwoNodes() as nodes:
            run, procs, logs = self.start_until_first_checkpoint(nodes, "link_down")
            nodes.ip("-n", nodes.b, "link", "set", nodes.link_b, "down")
            self.assert_both_nodes_stop(nodes, procs, logs, "node B's link down")
        # The last complete checkpoint resumes on one node, 2 ranks (resharded from 4), to the end.
        p = subprocess.run([os.path.join(BIN, "ft_launch"), "--nproc_per_node", "2", os.path.join(BIN, "ft_train"),
                            run.config], env=clean_env(), capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 0, (p.stdout + p.stderr)[-3000:])
        self.assertIn("resum", p.stdout + p.stderr)
        self.assertTrue(os.path.exists(os.path.join(run.run_dir, "adapter", "adapter_model.safetensors")))

    def test_a_node_whose_link_comes_back_rejoins_under_max_restarts(self):
        with TwoNodes() as nodes:
            run, procs, logs = self.start_until_first_checkpoint(
                nodes, "rejoin", extra=("--max-restarts", "3", "--join-timeout", "300"))
            nodes.ip("-n", nodes.b, "link", "set", nodes.link_b, "down")
            down = time.monotonic()
            # Both nodes' ranks stop (parallel.timeout_s) and their launchers go back to meeting:
            # node A waits for node B's launcher, which cannot reach it while the link is down.
            deadline = down + 4 * TIMEOUT_S + 60
            waiting = lambda: (read(logs[0]).count("waiting for the launchers of the other 1 node(s)") >= 2 and
                               read(logs[1]).count("joining node 0's launcher") >= 2)
            while not waiting() and time.monotonic() < deadline and all(p.poll() is None for p in procs):
                time.sleep(0.1)
            self.assertTrue(waiting(), read(logs[0])[-3000:] + read(logs[1])[-3000:])
            stopped = time.monotonic() - down
            nodes.ip("-n", nodes.b, "link", "set", nodes.link_b, "up")
            up = time.monotonic()
            codes = wait_all(procs, 600)
            out_a, out_b = read(logs[0]), read(logs[1])
            self.assertEqual(codes, [0, 0], out_a[-3000:] + out_b[-3000:])
            self.assertIn("all 2 nodes are here: start 1", out_a)
            self.assertIn("all 2 nodes are here: start 1", out_b)
            print(f"node B's link down -> both nodes' ranks stopped and their launchers waited after {stopped:.1f} s; "
                  f"link up -> rejoined and finished {time.monotonic() - up:.1f} s later", file=sys.stderr)
        # Resumed from the latest checkpoint: every step's loss and the adapter as if nothing happened.
        self.assertEqual(run.losses_by_step(), dict(enumerate(self.reference.losses(), 1)))
        self.assertEqual(run.adapter(), self.reference.adapter())

    def test_packets_dropped_stops_every_rank(self):
        if shutil.which("iptables"):
            drop = [["iptables", "-A", "INPUT", "-j", "DROP"], ["iptables", "-A", "OUTPUT", "-j", "DROP"]]
        elif shutil.which("nft"):
            drop = [["nft", "add", "table", "inet", "ftdrop"],
                    ["nft", "add chain inet ftdrop in { type filter hook input priority 0 ; policy drop ; }"],
                    ["nft", "add chain inet ftdrop out { type filter hook output priority 0 ; policy drop ; }"]]
        else:
            self.skipTest("no iptables or nft on this machine: dropping node B's packets is not tested here "
                          "(node B's link set down is)")
        with TwoNodes() as nodes:
            run, procs, logs = self.start_until_first_checkpoint(nodes, "packets_dropped")
            for command in drop:
                subprocess.run(["ip", "netns", "exec", nodes.b, *command], check=True)
            self.assert_both_nodes_stop(nodes, procs, logs, "node B's packets dropped")

    def test_node_killed_at_once_stops_the_other_node(self):
        with TwoNodes() as nodes:
            run, procs, logs = self.start_until_first_checkpoint(nodes, "node_killed")
            # Node B's launcher and its ranks, all at once (a power cut as the other node sees it).
            for pid in subprocess.run(["ip", "netns", "pids", nodes.b], capture_output=True, text=True).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            killed = time.monotonic()
            code_a = wait_all(procs[:1], 2 * TIMEOUT_S + 30)[0]
            seconds = time.monotonic() - killed
            procs[1].wait()
            out_a = read(logs[0])
            self.assertNotIn(code_a, (0, None), out_a[-3000:])
            self.assertRegex(out_a, r"error: .*rank [23]", out_a[-3000:])
            errors = [line for line in out_a.splitlines() if "error:" in line]
            print(f"node B killed -> node A's launcher exited after {seconds:.1f} s: {errors[0] if errors else ''}",
                  file=sys.stderr)

    def test_master_unreachable_at_start_names_its_address(self):
        with TwoNodes() as nodes:
            run = Run(self.tmp, "master_unreachable", timeout_s=TIMEOUT_S)
            port = free_port()
            nodes.ip("-n", nodes.a, "link", "set", nodes.link_a, "down")
            log = os.path.join(run.dir, "node1.log")
            start = time.monotonic()
            proc = nodes.start(nodes.b, launch(nodes, 1, port, run), clean_env(), log)
            code = wait_all([proc], 2 * TIMEOUT_S + 30)[0]
            seconds = time.monotonic() - start
            output = read(log)
            self.assertNotIn(code, (0, None), output[-3000:])
            self.assertIn(f"{NODE_A}:{port}", output, output[-3000:])
            errors = [line for line in output.splitlines() if "error:" in line]
            print(f"master unreachable -> node B's launcher exited after {seconds:.1f} s: "
                  f"{errors[0] if errors else ''}", file=sys.stderr)

    def test_one_node_store_is_not_reachable_from_another_host(self):
        if LIBTORCH.startswith("1."):
            self.skipTest(f"LibTorch {LIBTORCH}: its c10d store listens on every interface and cannot be given a "
                          "socket bound to one (README: what a run exposes)")
        with TwoNodes() as nodes:
            run = Run(self.tmp, "store_binding", timeout_s=30)
            port = free_port()
            # Rank 0 of 2 alone: it hosts the store and waits for rank 1, which never comes.
            env = clean_env(RANK="0", LOCAL_RANK="0", WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                            MASTER_PORT=str(port))
            log = os.path.join(run.dir, "rank0.log")
            rank0 = nodes.start(nodes.a, [os.path.join(BIN, "ft_train"), run.config], env, log)
            try:
                listening = False
                deadline = time.monotonic() + 60
                while not listening and time.monotonic() < deadline:
                    probe = subprocess.run(["ip", "netns", "exec", nodes.a, sys.executable, "-c",
                                            f"import socket; socket.create_connection(('127.0.0.1', {port}), 1)"],
                                           capture_output=True)
                    listening = probe.returncode == 0
                    time.sleep(0.1)
                self.assertTrue(listening, read(log)[-3000:])
                reach = subprocess.run(["ip", "netns", "exec", nodes.b, sys.executable, "-c",
                                        f"import socket; socket.create_connection(('{NODE_A}', {port}), 2)"],
                                       capture_output=True, text=True)
                self.assertNotEqual(reach.returncode, 0, "node B reached the one-node store of node A")
                self.assertIn("ConnectionRefused", reach.stderr)
            finally:
                rank0.kill()
                rank0.wait()


if __name__ == "__main__":
    # SIGTERM (ctest's timeout) unwinds like an error, so that the namespaces are deleted.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))
    # `test_multinode.py MultiNode` without namespaces: exit 77, which ctest reports as skipped.
    if sys.argv[1:] == ["MultiNode"] and namespaces_unavailable():
        print("skipped: " + namespaces_unavailable())
        sys.exit(77)
    unittest.main(verbosity=2)
