#!/usr/bin/env bash
# Installs what the build, the tests and the reference scripts need. Idempotent: what is already
# there is skipped, and `apt-get update` runs at most once.
#   scripts/setup.sh                  # Debian 12 packages: LibTorch 1.13 (CPU, Gloo) and the tools
#   scripts/setup.sh --libtorch pip   # the same, plus a CUDA LibTorch: the pinned pip torch wheel
#                                     # in .venv/ (inside the checkout, ignored by git), and the
#                                     # pinned transformers, peft, sentencepiece and tokenizers
#                                     # that the interop tests run against (scripts/interop-requirements.txt)
# The pip LibTorch comes with only the CUDA libraries its libtorch_cuda.so loads (the versions the
# torch wheel pins; no Python dependencies, no Triton): 2.46 GB downloaded, 3.9 GB installed.
# It runs on a machine without a GPU too (every CUDA query answers "no device").
set -euo pipefail
cd "$(dirname "$0")/.."

libtorch=debian
case "${1:-}" in
  "") ;;
  --libtorch)
    libtorch=${2:?usage: scripts/setup.sh [--libtorch debian|pip]}
    case "$libtorch" in debian|pip) ;; *) echo "setup.sh: --libtorch takes debian or pip, not '$libtorch'" >&2; exit 2 ;; esac ;;
  *) echo "usage: scripts/setup.sh [--libtorch debian|pip]" >&2; exit 2 ;;
esac

packages=(
  build-essential cmake ninja-build pkg-config git
  libtorch-dev            # LibTorch 1.13 (CPU) with c10d: TCPStore, ProcessGroupGloo
  libgloo-dev             # Gloo headers that c10d's ProcessGroupGloo header includes
  libopenblas0-pthread    # without it LibTorch falls back to the reference BLAS: ~40x slower matmuls
  nlohmann-json3-dev      # configs, safetensors headers, HF config.json
  libcxxopts-dev          # command-line parsing in apps/
  libgtest-dev            # unit and multi-rank tests
  zlib1g-dev              # CRC-32 checksums of checkpoint files
  python3-torch           # reference values (tests/reference/*.py)
  python3-sentencepiece   # reference tokenization (ft reads tokenizer.model itself, see lib/data/tokenizer.h)
  python3-numpy
  python3-matplotlib      # scripts/plot_metrics.py
  clang-14 libclang-rt-14-dev  # the compiler the build scripts pick (half g++'s build time), sanitizers, libFuzzer
  iproute2                # `ip netns`: the multi-node tests run two hosts as network namespaces (as root)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} Debian packages already installed"
else
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  echo "setup: Debian packages done"
fi

[ "$libtorch" = pip ] || exit 0

# The CUDA LibTorch. torch 2.15.0 on PyPI is built with CUDA 13.2 and NCCL 2.30.7; the nvidia-*
# pins are the ones its metadata requires (cuda-toolkit 13.2.2's components), limited to the
# libraries libtorch_cuda.so and libtorch_cpu.so name as needed (readelf -d): cudart, cupti,
# cuBLAS, cuFFT, cuFile, cuSPARSE (+ nvJitLink), NVRTC, cuDNN, cuSPARSELt, NCCL, NVSHMEM.
# cuSOLVER (loaded only for linear algebra on the GPU) and cuRAND are left out. ft compiles its
# NCCL and CUDA runtime calls against these same wheels' headers (cmake/FtTorch.cmake); the CUDA
# toolkit's nvcc (/usr/local/cuda) is needed only because LibTorch's CMake package looks for it.
torch_pin=torch==2.15.0
cuda_pins=(
  'nvidia-cuda-runtime==13.2.86.*' 'nvidia-cuda-cupti==13.2.86.*' 'nvidia-cuda-nvrtc==13.2.86.*'
  'nvidia-cublas==13.4.1.3.*' 'nvidia-cufft==12.2.0.57.*' 'nvidia-cufile==1.17.1.22.*'
  'nvidia-cusparse==12.7.10.12.*' 'nvidia-nvjitlink==13.2.86.*'
  nvidia-cudnn-cu13==9.26.0.51 nvidia-cusparselt-cu13==0.8.1 nvidia-nccl-cu13==2.30.7
  nvidia-nvshmem-cu13==3.7.2
)
venv=.venv
if [ ! -x "$venv/bin/python3" ]; then
  echo "setup: creating $venv"
  python3 -m venv "$venv"
fi
if "$venv/bin/python3" -m pip show -q torch >/dev/null 2>&1 &&
   [ "$("$venv/bin/python3" -m pip show torch 2>/dev/null | sed -n 's/^Version: //p')" = "${torch_pin#torch==}" ] &&
   [ -f "$venv/.ft-cuda-pins" ] && [ "$(cat "$venv/.ft-cuda-pins")" = "${cuda_pins[*]}" ]; then
  echo "setup: $torch_pin and its CUDA libraries already in $venv"
else
  echo "setup: installing $torch_pin and ${#cuda_pins[@]} CUDA library wheels into $venv (about 2.5 GB)"
  start=$(date +%s)
  # --no-deps: of the wheel's Python dependencies, only the pure-Python ones that `import torch`
  # needs are installed below (no Triton, no CUDA toolkit wheels: torch runs on the CPU here).
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check --no-deps "$torch_pin" "${cuda_pins[@]}"
  echo "${cuda_pins[*]}" > "$venv/.ft-cuda-pins"
  echo "setup: pip LibTorch installed in $(( $(date +%s) - start )) s ($(du -sh "$venv" | cut -f1) in $venv)"
fi

# The live references of the interop tests (ctest -L interop): torchrun (import torch), transformers,
# PEFT, sentencepiece and tokenizers, every package pinned, with the pure-Python dependencies
# torch needs to import. --no-deps keeps pip from pulling Triton and CUDA wheels for torch.
requirements=scripts/interop-requirements.txt
if [ -f "$venv/.ft-interop-pins" ] && cmp -s "$venv/.ft-interop-pins" "$requirements"; then
  echo "setup: interop packages already in $venv"
else
  start=$(date +%s)
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check --no-deps -r "$requirements"
  cp "$requirements" "$venv/.ft-interop-pins"
  echo "setup: $(grep -c '==' "$requirements") interop packages (transformers, peft, sentencepiece, ...) installed in $(( $(date +%s) - start )) s"
fi
