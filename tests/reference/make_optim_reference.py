#!/usr/bin/env python3
"""Reference values for ft::optim (tests/optim/*_test.cpp), from PyTorch 1.13 itself.

Run with Debian's python3-torch (not the pyenv python3 on PATH, which has no torch):
    /usr/bin/python3 tests/reference/make_optim_reference.py > tests/data/optim_reference.json

What each section is made with:
- "adamw": torch.optim.AdamW (foreach=False: the single-tensor path) on three parameter tensors in
  two param groups, weight_decay on [w1, w2] and 0 on [b], for several hyper-parameter sets and a
  learning rate set per step (as a schedule does). Gradients are deterministic functions of the
  element index and the step (no RNG) and are written out, with the parameters and both moment
  buffers after every step, flattened in the order w1, b, w2 (= ft's flat buffer and segments).
- "schedules": transformers is not installed here, so the lambdas are transcribed literally from
  transformers' src/transformers/optimization.py (_get_constant_schedule_with_warmup_lr_lambda,
  _get_linear_schedule_with_warmup_lr_lambda, and _get_cosine_schedule_with_warmup_lr_lambda with
  num_cycles=0.5 and min_lr_rate as get_cosine_with_min_lr_schedule_with_warmup uses it). ft also
  floors linear at min_lr_ratio the same way (factor * (1 - min) + min): that lambda is ft's, marked
  below. Each is driven through torch.optim.lr_scheduler.LambdaLR on a real optimizer, recording
  the lr that optimizer step s (0-based) uses.
- "clip": torch.nn.utils.clip_grad_norm_ (2-norm) on three gradients: total norm and clipped
  gradients; Inf and NaN cases give a non-finite norm (written as the strings "inf" / "nan").
  ft's grad_clip = 0 means "off"; torch would zero the gradients, so that case is not here.
- "scaler": torch.cuda.amp.GradScaler's own Python (unscale_, step's skip decision, update,
  state_dict) on CPU tensors. 1.13 has no CPU kernels for it, so three CUDA-only pieces are replaced:
  the CUDA-availability check, _MultiDeviceReplicator's is_cuda assert, and the two kernels
  _amp_foreach_non_finite_check_and_unscale_ / _amp_update_scale_, transcribed below from
  aten/src/ATen/native/cuda/AmpKernels.cu (fp32 scale; products in double, rounded to fp32; no
  growth past fp32's range).
"""
import json
import math
import struct
import sys

import torch
import torch.cuda.amp.grad_scaler as grad_scaler_module

torch.set_num_threads(1)
F32 = torch.float32


def f32(x):
    """Rounds a Python float to fp32 (as a CUDA kernel's float assignment does)."""
    return struct.unpack("f", struct.pack("f", x))[0]


def json_number(x):
    return x if math.isfinite(x) else ("nan" if math.isnan(x) else ("inf" if x > 0 else "-inf"))


def values(t):
    return [json_number(float(v)) for v in t.detach().flatten().tolist()]


# --- AdamW ----------------------------------------------------------------------------------
SHAPES = [("w1", (5, 7), True), ("b", (11,), False), ("w2", (3, 8), True)]


def initial_param(name, shape):
    n = math.prod(shape)
    offset = {"w1": 0.0, "b": 1.0, "w2": 2.0}[name]
    i = torch.arange(n, dtype=torch.float64)
    # Bounded away from zero so relative errors mean something.
    return ((0.6 + 0.4 * torch.cos(0.37 * i + offset)) * torch.where(i % 3 == 1, -1.0, 1.0)).to(F32).reshape(shape)


def gradient(name, shape, step, scale):
    n = math.prod(shape)
    offset = {"w1": 0.3, "b": 1.7, "w2": 2.9}[name]
    i = torch.arange(n, dtype=torch.float64)
    g = torch.sin(0.71 * i + 1.9 * step + offset) * (1.0 + 0.5 * torch.cos(0.13 * i * (step + 1)))
    g = g * torch.pow(10.0, (i % 5) - 2.0) * scale  # magnitudes 1e-2 .. 1e2 times scale
    g = torch.where(i % 13 == 0, torch.zeros_like(g), g)  # some never get a gradient: v stays 0
    return g.to(F32).reshape(shape)


def adamw_case(name, lrs, betas, eps, weight_decay, grad_scale):
    params = {n: initial_param(n, s).clone().requires_grad_(True) for n, s, _ in SHAPES}
    decay = [params[n] for n, _, d in SHAPES if d]
    no_decay = [params[n] for n, _, d in SHAPES if not d]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=lrs[0], betas=betas, eps=eps, foreach=False)
    flat = lambda ts: [v for t in ts for v in values(t)]
    order = [params[n] for n, _, _ in SHAPES]
    out = {"name": name, "beta1": betas[0], "beta2": betas[1], "eps": eps, "weight_decay": weight_decay,
           "initial_params": flat(order), "steps": []}
    for step, lr in enumerate(lrs):
        for group in opt.param_groups:
            group["lr"] = lr
        grads = [gradient(n, s, step, grad_scale) for n, s, _ in SHAPES]
        for p, g in zip(order, grads):
            p.grad = g.clone()
        opt.step()
        out["steps"].append({
            "lr": lr,
            "grad": flat(grads),
            "params": flat(order),
            "exp_avg": flat(opt.state[p]["exp_avg"] for p in order),
            "exp_avg_sq": flat(opt.state[p]["exp_avg_sq"] for p in order),
            "step": int(opt.state[order[0]]["step"].item()),
        })
    return out


def adamw_section():
    segments, offset = [], 0
    for n, s, d in SHAPES:
        segments.append({"name": n, "offset": offset, "length": math.prod(s), "decay": d})
        offset += math.prod(s)
    steps = 12
    cases = [
        adamw_case("defaults_wd0.01", [1e-3] * steps, (0.9, 0.999), 1e-8, 0.01, 1.0),
        # Warmup-like lr starting at 0 (state still advances), strong decay, small betas.
        adamw_case("warmup_lr_wd0.1", [0.03 * s / 4 if s < 4 else 0.03 * (steps - s) / (steps - 4)
                                       for s in range(steps)], (0.8, 0.95), 1e-6, 0.1, 1.0),
        # Large eps, large decay, tiny gradients (eps dominates the denominator).
        adamw_case("big_eps_wd0.5", [0.01 * (0.5 + 0.5 * math.cos(math.pi * s / steps)) for s in range(steps)],
                   (0.5, 0.9), 1e-3, 0.5, 1e-3),
    ]
    return {"numel": offset, "segments": segments, "cases": cases}


# --- LR schedules: transformers/optimization.py, transcribed -------------------------------
def _get_constant_schedule_with_warmup_lr_lambda(current_step, *, num_warmup_steps):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1.0, num_warmup_steps))
    return 1.0


def _get_linear_schedule_with_warmup_lr_lambda(current_step, *, num_warmup_steps, num_training_steps):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    return max(0.0, float(num_training_steps - current_step) / float(max(1, num_training_steps - num_warmup_steps)))


def _get_cosine_schedule_with_warmup_lr_lambda(current_step, *, num_warmup_steps, num_training_steps, num_cycles,
                                               min_lr_rate=0.0):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    progress = float(current_step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
    factor = 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress))
    factor = factor * (1 - min_lr_rate) + min_lr_rate
    return max(0, factor)


def ft_linear_with_min_lr_lambda(current_step, *, num_warmup_steps, num_training_steps, min_lr_rate):
    """ft's extension (not in transformers): the linear lambda, floored as the cosine one is."""
    factor = _get_linear_schedule_with_warmup_lr_lambda(current_step, num_warmup_steps=num_warmup_steps,
                                                        num_training_steps=num_training_steps)
    if current_step < num_warmup_steps:
        return factor
    return factor * (1 - min_lr_rate) + min_lr_rate


def schedule_lambda(kind, warmup, total, min_ratio):
    if kind == "constant":
        return lambda s: _get_constant_schedule_with_warmup_lr_lambda(s, num_warmup_steps=warmup)
    if kind == "linear":
        if min_ratio == 0.0:
            return lambda s: _get_linear_schedule_with_warmup_lr_lambda(s, num_warmup_steps=warmup,
                                                                        num_training_steps=total)
        return lambda s: ft_linear_with_min_lr_lambda(s, num_warmup_steps=warmup, num_training_steps=total,
                                                      min_lr_rate=min_ratio)
    return lambda s: _get_cosine_schedule_with_warmup_lr_lambda(s, num_warmup_steps=warmup, num_training_steps=total,
                                                                num_cycles=0.5, min_lr_rate=min_ratio)


def schedules_section():
    base_lr = 2e-5
    settings = [(0, 10, 0.0), (3, 10, 0.0), (4, 12, 0.1), (10, 10, 0.0), (5, 3, 0.0), (1, 1, 0.0), (2, 20, 0.25),
                (100, 1000, 0.0)]
    out = []
    for kind in ["constant", "linear", "cosine"]:
        for warmup, total, min_ratio in settings:
            p = torch.zeros(1, requires_grad=True)
            opt = torch.optim.SGD([p], lr=base_lr)
            sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule_lambda(kind, warmup, total, min_ratio))
            lrs = []
            for _ in range(total + 4):  # a few steps past the end, too
                lrs.append(opt.param_groups[0]["lr"])  # the lr this optimizer step uses
                p.grad = torch.zeros(1)
                opt.step()
                sched.step()
            out.append({"kind": kind, "base_lr": base_lr, "warmup_steps": warmup, "total_steps": total,
                        "min_lr_ratio": min_ratio, "lr": lrs})
    return out


# --- clip_grad_norm_ --------------------------------------------------------------------------
def clip_grads(kind):
    shapes = [(4, 5), (7,), (2, 3, 2)]
    grads = []
    for k, s in enumerate(shapes):
        i = torch.arange(math.prod(s), dtype=torch.float64)
        grads.append((torch.cos(0.9 * i + k) * (k + 1) * 0.8).to(F32).reshape(s))
    if kind == "inf":
        grads[1][3] = math.inf
    if kind == "nan":
        grads[2][0, 1, 1] = math.nan
    return grads


def clip_section():
    out = []
    for kind, max_norm in [("finite", 1.0), ("finite", 0.25), ("finite", 1e3), ("finite", 5.0), ("inf", 1.0),
                           ("nan", 1.0)]:
        grads = clip_grads(kind)
        params = [torch.zeros_like(g, requires_grad=True) for g in grads]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        total = torch.nn.utils.clip_grad_norm_(params, max_norm)
        entry = {"kind": kind, "max_norm": max_norm, "grads": [values(g) for g in grads],
                 "total_norm": json_number(float(total))}
        if kind == "finite":
            entry["clipped"] = [values(p.grad) for p in params]
        out.append(entry)
    return out


# --- GradScaler ------------------------------------------------------------------------------
def amp_foreach_non_finite_check_and_unscale_(scaled_grads, found_inf, inv_scale):
    """AmpKernels.cu: found_inf = 1 if any value is Inf/NaN; val * inv_scale (val if inv_scale == 1)."""
    for g in scaled_grads:
        if not bool(torch.isfinite(g).all()):
            found_inf.fill_(1.0)
        if float(inv_scale) != 1.0:
            g.mul_(inv_scale)


def amp_update_scale_(current_scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    """AmpKernels.cu amp_update_scale_cuda_kernel (1.13), one thread, transcribed."""
    scale = float(current_scale.item())
    if float(found_inf.item()):
        current_scale.fill_(f32(scale * backoff_factor))
        growth_tracker.fill_(0)
    else:
        successful = int(growth_tracker.item()) + 1
        if successful == growth_interval:
            new_scale = f32(scale * growth_factor)
            if math.isfinite(new_scale):  # do not grow the scale past fp32 bounds to inf
                current_scale.fill_(new_scale)
            growth_tracker.fill_(0)
        else:
            growth_tracker.fill_(successful)
    return current_scale


class _CpuReplicator(grad_scaler_module._MultiDeviceReplicator):
    def __init__(self, master_tensor):  # the original asserts master_tensor.is_cuda
        self.master = master_tensor
        self._per_device_tensors = {}


def scaler_case(name, pattern, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                grad_magnitude=1.0):
    scaler = grad_scaler_module.GradScaler(init_scale=init_scale, growth_factor=growth_factor,
                                           backoff_factor=backoff_factor, growth_interval=growth_interval)
    assert scaler.is_enabled()
    scaler._lazy_init_scale_growth_tracker(torch.device("cpu"))  # what scale(loss) does on first use
    p = torch.ones(6, requires_grad=True)
    opt = torch.optim.SGD([p], lr=0.1)
    steps_taken = [0]
    real_step = opt.step

    def counting_step(*args, **kwargs):
        steps_taken[0] += 1
        return real_step(*args, **kwargs)

    opt.step = counting_step
    out = {"name": name, "init_scale": init_scale, "growth_factor": growth_factor, "backoff_factor": backoff_factor,
           "growth_interval": growth_interval, "grad_magnitude": grad_magnitude, "pattern": pattern,
           "scale": [], "growth_tracker": [], "stepped": []}
    unscale = None
    for k, c in enumerate(pattern):
        scale = scaler.get_scale()
        base = torch.tensor([0.5, -1.25, 3.0, 1e-3, -7.5, 0.1], dtype=F32) * grad_magnitude
        g = base * scale
        if c == "1":
            g[k % 6] = math.inf if k % 2 == 0 else math.nan
        scaled = values(g)
        p.grad = g
        before = steps_taken[0]
        scaler.unscale_(opt)
        if unscale is None:
            unscale = {"scale": scale, "scaled_grad": scaled, "unscaled_grad": values(p.grad)}
        scaler.step(opt)
        scaler.update()
        state = scaler.state_dict()
        out["scale"].append(state["scale"])
        out["growth_tracker"].append(state["_growth_tracker"])
        out["stepped"].append(steps_taken[0] > before)
    out["unscale_example"] = unscale
    return out


def scaler_section():
    grad_scaler_module.amp_definitely_not_available = lambda: False
    grad_scaler_module._MultiDeviceReplicator = _CpuReplicator
    torch._amp_foreach_non_finite_check_and_unscale_ = amp_foreach_non_finite_check_and_unscale_
    torch._amp_update_scale_ = amp_update_scale_
    return [
        scaler_case("interval3", "0000100000011000010000000", growth_interval=3),
        scaler_case("odd_factors", "00100000100110000000", init_scale=1000.0, growth_factor=1.5, backoff_factor=0.3,
                    growth_interval=2),
        # The scale stops at 2^127 (2^128 is Inf in fp32); at magnitude 1 the grads would overflow first.
        scaler_case("fp32_ceiling", "000000", init_scale=2.0 ** 126, growth_interval=1, grad_magnitude=1e-3),
        # The defaults: three overflows, then 2000 good steps grow the scale once.
        scaler_case("defaults", "111" + "0" * 2001),
    ]


def main():
    ref = {
        "generator": "tests/reference/make_optim_reference.py",
        "torch_version": torch.__version__,
        "adamw": adamw_section(),
        "schedules": schedules_section(),
        "clip": clip_section(),
        "scaler": scaler_section(),
    }
    json.dump(ref, sys.stdout, indent=None, separators=(",", ":"), allow_nan=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
