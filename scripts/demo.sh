#!/usr/bin/env bash
# The README's first command: install what is missing, build the three programs it runs,
# fine-tune a LoRA adapter on the bundled TinyStories model with the bundled instruction data on
# 2 ranks (Gloo, one per core), then generate with the base model plus the new adapter.
# Only those programs are built (ft_train_app is the target of bin/ft_train; ft_train is the
# library): the test suites are most of a full build, which scripts/test.sh does.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh ft_launch ft_train_app ft_generate
rm -rf runs/tiny_lora
./build/bin/ft_launch --nproc_per_node 2 ./build/bin/ft_train configs/tiny_lora.json
./build/bin/ft_generate --model tests/data/stories260K --adapter runs/tiny_lora/adapter --template alpaca \
  --prompt "Give three tips for staying healthy." --temperature 0 --max-new-tokens 60 --threads 1
