#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU and a pip torch (CUDA LibTorch): configure ft
# against that torch, build what the check runs with every core, run the GPU suite (ctest -L gpu),
# then measure bf16 training of a random ~1B LLaMA: bench_forward_backward (sdpa and eager
# attention) and ft_bench on one rank (LoRA and full fine-tuning, GPU utilization from NVML per
# step). Logs and summary.json go to OUT_DIR; the summary is printed last. About 6-8 minutes on
# 16 cores and one GPU.
#   scripts/gpu_check.sh OUT_DIR
#   scripts/gpu_check.sh OUT_DIR --deps .gpu-deps         # no apt there: headers from scripts/gpu_deps.sh
#   scripts/gpu_check.sh OUT_DIR --prebuilt build-device  # binaries built elsewhere against the same torch
#   scripts/gpu_check.sh OUT_DIR --fallback build-device  # build; use those binaries if the build fails
# FT_PYTHON: the python whose torch to build against (default python3). Every stage runs under a
# time limit and a failed stage does not stop the later ones; the exit code is 1 when any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu_check.sh OUT_DIR [--deps DIR] [--prebuilt DIR | --fallback DIR]}
shift
deps="" prebuilt="" fallback=""
while [ $# -gt 0 ]; do
  case "$1" in
    --deps) deps=$(realpath "$2"); shift 2 ;;
    --prebuilt) prebuilt=$(realpath "$2"); shift 2 ;;
    --fallback) fallback=$(realpath "$2"); shift 2 ;;
    *) echo "gpu_check.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
out=$(realpath "$out")
python=${FT_PYTHON:-python3}
jobs=$(nproc)
status="$out/status.txt"
: > "$status"
start_all=$(date +%s)
log() { echo "[gpu_check $(($(date +%s) - start_all))s] $*"; }
# stage NAME SECONDS COMMAND...: runs it with a limit, appends "NAME ok|failed|timeout SECONDS" to status.txt.
stage() {
  local name=$1 limit=$2
  shift 2
  local t0=$(date +%s)
  log "$name ..."
  timeout --kill-after=10 "$limit" "$@"
  local rc=$?
  local verdict=ok
  [ $rc -eq 124 ] && verdict=timeout
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && verdict=failed
  echo "$name $verdict $(($(date +%s) - t0)) rc=$rc" >> "$status"
  log "$name: $verdict in $(($(date +%s) - t0)) s"
  return $rc
}

# --- the machine -------------------------------------------------------------------------------
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
  nvidia-smi topo -m 2>/dev/null | head -5
  "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())), "devices", torch.cuda.device_count())'
  nvcc --version | tail -2
  c++ --version | head -1
  cmake --version | head -1
  echo "cores: $jobs"
} > "$out/env.txt" 2>&1
cat "$out/env.txt"
torch_cmake=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
torch_lib=$("$python" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')

# --- build -------------------------------------------------------------------------------------
build_dir=build-gpu
targets=(test_gpu ft_train_app ft_launch ft_generate ft_bench_app bench_forward_backward make_random_model)
cmake_args=(-S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_cmake")
if [ -n "$deps" ]; then
  cmake_args=(-S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_cmake;$deps"
              -DFT_GLOO_INCLUDE_DIR="$deps/include" -DCXXOPTS_INCLUDE_DIR="$deps/include"
              -DZLIB_INCLUDE_DIR="$deps/include" -DZLIB_LIBRARY="$(ls "$deps"/lib/*/libz.a)")
fi
if [ -n "$prebuilt" ]; then
  build_dir=$prebuilt
  echo "build prebuilt 0 ($prebuilt)" >> "$status"
else
  stage configure 120 cmake "${cmake_args[@]}" > "$out/build.log" 2>&1 &&
    stage build 360 ninja -C "$build_dir" -j "$jobs" "${targets[@]}" >> "$out/build.log" 2>&1
  build_rc=$?
  grep -E "^-- ft:|CMake Error|error:|warning:|FAILED" "$out/build.log" | head -40
  if [ $build_rc -ne 0 ] && [ -n "$fallback" ]; then
    log "the build failed: using the binaries in $fallback"
    build_dir=$fallback
  fi
fi
bin="$build_dir/bin"
# Binaries built elsewhere find this torch's libraries (and the CUDA and NCCL wheels beside it),
# the checkout's test data and their sibling programs through the environment.
nvidia_libs=$(ls -d "$torch_lib"/../../nvidia/*/lib 2>/dev/null | tr '\n' ':')
export LD_LIBRARY_PATH="$torch_lib:$nvidia_libs${LD_LIBRARY_PATH:-}"
export FT_BIN_DIR=$(realpath "$bin") FT_TEST_DATA_DIR=$PWD/tests/data

# --- the GPU suite -----------------------------------------------------------------------------
# ctest -L gpu where this script built the suite; a prebuilt one runs directly (its ctest files
# name the folders of the machine it was built on).
export GTEST_OUTPUT=json:$out/test_gpu.json
if [ -f "$build_dir/CTestTestfile.cmake" ] && [ "$build_dir" = build-gpu ]; then
  stage tests 240 ctest --test-dir "$build_dir" -L gpu -V > "$out/test_gpu.log" 2>&1
else
  stage tests 240 "$build_dir/tests/test_gpu" > "$out/test_gpu.log" 2>&1
fi
unset GTEST_OUTPUT
grep -E "\[  (PASSED|FAILED) |\[ +FAILED|Failure|SKIPPED|sdpa vs eager|SDPA backend|NVML:|FSDP on|bf16: step|tests passed|Skipped" \
  "$out/test_gpu.log" | head -60

# --- benchmarks --------------------------------------------------------------------------------
# A ~1B LLaMA (16 layers, hidden 2048, SwiGLU 5632, LLaMA-2 vocabulary), bf16, 8 x 2048 tokens.
fb_args=(--device cuda --dtype bf16 --layers 16 --hidden 2048 --heads 16 --kv-heads 16 --intermediate 5632
         --batch 8 --seq 2048 --steps 10)
stage bench_sdpa 120 "$bin/bench_forward_backward" "${fb_args[@]}" --attention sdpa > "$out/bench.log" 2>&1
model=/tmp/ft_random_1b
stage random_model 90 "$bin/make_random_model" --out "$model" --hidden 2048 --layers 16 --heads 16 \
  --intermediate 5632 --tokenizer-from tests/data/llama2-tokenizer >> "$out/bench.log" 2>&1
common=(--set model.path=$model --set data.train=tests/data/datasets/alpaca_train.json --set data.eval=
        --set data.max_seq_len=2048 --set data.packing=true --set train.precision=bf16
        --set train.micro_batch_size=4 --set train.global_batch_size=16 --set train.activation_checkpointing=false
        --set log.eval_every_steps=0)
for kind in lora full; do
  config=configs/tiny_lora.json
  extra=(--set lora.r=16)
  [ $kind = full ] && config=configs/tiny_zero2.json && extra=()
  stage "ft_bench_$kind" 120 "$bin/ft_bench" "$config" --ranks 1 --steps 8 --warmup 2 --no-chart \
    --out "/tmp/ft_bench_$kind" "${common[@]}" "${extra[@]}" >> "$out/bench.log" 2>&1
  cp "/tmp/ft_bench_$kind/bench.json" "$out/bench_$kind.json" 2>/dev/null
  metrics=$(ls /tmp/ft_bench_$kind/*/metrics.jsonl 2>/dev/null | head -1)
  [ -n "$metrics" ] && cp "$metrics" "$out/metrics_$kind.jsonl"
done
# Eager attention for comparison (the s² scores kept: 16 heads x 2048² per sequence and layer).
stage bench_eager 90 "$bin/bench_forward_backward" "${fb_args[@]}" --attention eager >> "$out/bench.log" 2>&1
grep -E "tokens/s|achieved|peak memory|model:|^ +1 " "$out/bench.log"

# --- summary -----------------------------------------------------------------------------------
"$python" - "$out" <<'EOF'
import glob, json, os, re, sys
out = sys.argv[1]
summary = {"stages": {}}
for line in open(os.path.join(out, "status.txt")):
    name, verdict, seconds, *rest = line.split()
    summary["stages"][name] = {"result": verdict, "seconds": int(seconds)}
env = open(os.path.join(out, "env.txt")).read()
summary["machine"] = env.strip().splitlines()[:3]
try:
    t = json.load(open(os.path.join(out, "test_gpu.json")))
    summary["tests"] = {"tests": t["tests"], "failures": t["failures"], "disabled": t.get("disabled", 0),
                        "failed": [f"{s['name']}.{c['name']}" for s in t["testsuites"] for c in s["testsuite"]
                                   if c.get("failures")],
                        "skipped": [f"{s['name']}.{c['name']}" for s in t["testsuites"] for c in s["testsuite"]
                                    if c.get("result") == "SKIPPED"]}
except Exception as e:
    summary["tests"] = {"error": str(e)}
log = open(os.path.join(out, "test_gpu.log")).read() if os.path.exists(os.path.join(out, "test_gpu.log")) else ""
summary["test_notes"] = [re.sub(r"^\d+: ", "", l) for l in log.splitlines()
                         if re.search(r"(sdpa vs eager|SDPA backend|NVML:|FSDP on|tiny_.*bf16)", l)]
bench = open(os.path.join(out, "bench.log")).read() if os.path.exists(os.path.join(out, "bench.log")) else ""
fb = []
for block in re.split(r"(?=model: )", bench):
    m = re.search(r"model: (.*)", block)
    tps = re.search(r"forward\+backward:\s+([\d.]+) tokens/s, ([\d.]+) s/step", block)
    ach = re.search(r"achieved:\s+([\d.]+) GFLOP/s .*= (\d+)% of the matmul peak", block)
    peak = re.search(r"matmul peak .*:\s+([\d.]+) GFLOP/s", block)
    mem = re.search(r"peak memory of a step:\s+([\d.]+) GB", block)
    if m and tps:
        fb.append({"model": m.group(1), "tokens_per_s": float(tps.group(1)), "s_per_step": float(tps.group(2)),
                   "tflops": float(ach.group(1)) / 1e3 if ach else None, "mfu_pct": int(ach.group(2)) if ach else None,
                   "matmul_peak_tflops": float(peak.group(1)) / 1e3 if peak else None,
                   "peak_memory_gb": float(mem.group(1)) if mem else None})
summary["bench_forward_backward"] = fb
for kind in ("lora", "full"):
    entry = {}
    try:
        b = json.load(open(os.path.join(out, f"bench_{kind}.json")))
        entry["bench"] = b.get("results", b)
    except Exception as e:
        entry["error"] = str(e)
    path = os.path.join(out, f"metrics_{kind}.jsonl")
    if os.path.exists(path):
        steps = [json.loads(l) for l in open(path) if '"loss"' in l]
        util = [s["gpu"][0].get("utilization_pct") for s in steps if s.get("gpu") and s["gpu"][0]]
        util = [u for u in util if u is not None]
        times = [s["time"]["step"] for s in steps[2:]] or [s["time"]["step"] for s in steps]
        if util:
            mean_util = sum(util[2:] or util) / len(util[2:] or util)
            mean_step = sum(times) / len(times)
            entry["gpu_utilization_pct"] = round(mean_util, 1)
            entry["gpu_idle_s_per_step"] = round((1 - mean_util / 100) * mean_step, 4)
            entry["step_s"] = round(mean_step, 4)
    summary[f"ft_bench_{kind}"] = entry
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
print(json.dumps(summary, indent=1))
EOF
if grep -qvE " ok | prebuilt " "$status"; then
  log "some stages failed:"; grep -vE " ok | prebuilt " "$status"; exit 1
fi
log "all stages passed"
