#!/usr/bin/python3
"""Reference index lists from PyTorch's own torch.utils.data.DistributedSampler for
ft::data::DistributedSampler (tests/data/distributed_sampler_test.cpp).

ft draws its shuffles with the same LibTorch CPU generator and randperm, so the lists must be
equal element for element. Run with Debian's python (python3-torch 1.13), from the repository
root:
    /usr/bin/python3 tests/reference/make_sampler_reference.py

Writes tests/data/sampler_reference.json:
  "torch_version": the version that produced it
  "cases": one entry per (n, world_size, shuffle, drop_last, seed, epoch):
           {"n", "world_size", "shuffle", "drop_last", "seed", "epoch", "num_samples",
            "total_size", "ranks": [[indices of rank 0], [rank 1], ...]}
           n covers n = 1, n < world_size, divisible and not (17, 100, 1000); every world size
           1-8 and every rank; epochs 0-2 with shuffle (one epoch without: arange does not
           depend on the epoch or seed); seeds 0 and 1234. drop_last with n < world_size is
           left out (every rank gets 0 samples; ft refuses it).
  "large": bigger n, checked through a digest instead of the full lists:
           {"n", "world_size", "shuffle", "drop_last", "seed", "epoch", "num_samples",
            "heads": first 8 indices per rank, "digests": per rank sum((j + 1) * index_j)}
Samplers are built on a plain list, so no process group is needed (num_replicas and rank given).
"""
import json
import os

import torch
from torch.utils.data.distributed import DistributedSampler

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                   "sampler_reference.json")


def rank_lists(n, world_size, shuffle, drop_last, seed, epoch):
    ranks = []
    for rank in range(world_size):
        s = DistributedSampler(list(range(n)), num_replicas=world_size, rank=rank,
                               shuffle=shuffle, seed=seed, drop_last=drop_last)
        s.set_epoch(epoch)
        ranks.append(list(iter(s)))
        num_samples, total_size = len(s), s.total_size
    return num_samples, total_size, ranks


def main():
    cases = []
    for n in [1, 2, 3, 5, 7, 8, 12, 16, 17, 100, 1000]:
        for world_size in range(1, 9):
            for shuffle in (True, False):
                for drop_last in (False, True):
                    if drop_last and n < world_size:
                        continue  # every rank would get 0 samples: ft refuses it
                    seeds = (0, 1234) if shuffle else (0,)
                    epochs = (0, 1, 2) if shuffle else (0,)
                    for seed in seeds:
                        for epoch in epochs:
                            num_samples, total_size, ranks = rank_lists(
                                n, world_size, shuffle, drop_last, seed, epoch)
                            cases.append({"n": n, "world_size": world_size, "shuffle": shuffle,
                                          "drop_last": drop_last, "seed": seed, "epoch": epoch,
                                          "num_samples": num_samples, "total_size": total_size,
                                          "ranks": ranks})
    large = []
    for n, world_size, drop_last, seed, epoch in [(100003, 8, False, 0, 0),
                                                   (100003, 8, True, 42, 3),
                                                   (65536, 4, False, 7, 1),
                                                   (1000000, 2, False, 2**40 + 7, 5)]:
        num_samples, _, ranks = rank_lists(n, world_size, True, drop_last, seed, epoch)
        large.append({"n": n, "world_size": world_size, "shuffle": True,
                      "drop_last": drop_last, "seed": seed, "epoch": epoch,
                      "num_samples": num_samples,
                      "heads": [r[:8] for r in ranks],
                      "digests": [sum((j + 1) * v for j, v in enumerate(r)) for r in ranks]})
    with open(OUT, "w") as f:
        json.dump({"torch_version": torch.__version__, "cases": cases, "large": large}, f,
                  separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT}: {len(cases)} cases, {len(large)} large, {os.path.getsize(OUT)} bytes")


if __name__ == "__main__":
    main()
