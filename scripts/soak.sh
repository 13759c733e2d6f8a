#!/usr/bin/env bash
# Soak: 2 ranks under ft_launch --max-restarts while a random rank is SIGKILLed every few seconds;
# the result must equal an uninterrupted run bit for bit (scripts/soak.py says how).
#   scripts/soak.sh [MINUTES]    # default 2; Debian's LibTorch build (build/)
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-2}
scripts/build.sh ft_launch ft_train_app >/dev/null
exec python3 scripts/soak.py --build build --minutes "$minutes"
