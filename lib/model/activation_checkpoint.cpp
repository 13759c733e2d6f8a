#include "model/activation_checkpoint.h"

#include <torch/torch.h>

#include <mutex>

#include "util/error.h"

namespace ft::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The default generators a layer on `device` draws from: the CPU one, plus the device's own
// (CUDA) when it is not the CPU. Asking for a CUDA generator happens only for CUDA tensors, so a
// CPU LibTorch never reaches the CUDA hooks.
struct RngState {
  at::Tensor cpu;
  at::Tensor device;
  c10::Device device_type = c10::kCPU;

  static RngState capture(c10::Device device) {
    RngState s;
    s.device_type = device;
    {
      at::Generator g = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(g.mutex());
      s.cpu = g.get_state();
    }
    if (!device.is_cpu()) {
      at::Generator g = at::globalContext().defaultGenerator(device);
      std::lock_guard<std::mutex> lock(g.mutex());
      s.device = g.get_state();
    }
    return s;
  }

  void restore() const {
    {
      at::Generator g = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(g.mutex());
      g.set_state(cpu);
    }
    if (device.defined()) {
      at::Generator g = at::globalContext().defaultGenerator(device_type);
      std::lock_guard<std::mutex> lock(g.mutex());
      g.set_state(device);
    }
  }
};

// Sets the generators to `replay` for its lifetime, then back to where they were.
class RngReplay {
 public:
  RngReplay(const RngState& replay, c10::Device device) : now_(RngState::capture(device)) { replay.restore(); }
  ~RngReplay() { now_.restore(); }
  RngReplay(const RngReplay&) = delete;
  RngReplay& operator=(const RngReplay&) = delete;

 private:
  RngState now_;
};

// What backward needs besides the saved input, kept in the autograd context as a capsule.
struct Recompute : torch::CustomClassHolder {
  CheckpointFn fn;
  std::vector<torch::Tensor> params;
  RngState rng;
  std::shared_ptr<OffloadedInputs> offload;  // where x waits for backward, when offloaded
  std::size_t offload_slot = 0;
  c10::Device device = c10::kCPU;  // where x was
};

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  // Runs with grad mode off (Function::apply turns it off): fn's activations are freed as it goes.
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, at::TensorList params,
                               c10::intrusive_ptr<Recompute> state) {
    FT_ASSERT(params.size() == state->params.size(), "checkpoint: parameter lists differ");
    state->rng = RngState::capture(x.device());
    state->device = x.device();
    torch::Tensor y = state->fn(x);
    FT_ASSERT(y.defined(), "checkpoint: the function returned no tensor");
    if (state->offload && x.is_cuda()) {
      state->offload_slot = state->offload->put(x);
    } else {
      state->offload.reset();  // on the CPU x is host memory already
      ctx->save_for_backward({x});
    }
    ctx->saved_data["state"] = c10::IValue::make_capsule(std::move(state));
    return y;
  }

  // Gradient slots: x, then one per parameter, then none for the state (not a tensor).
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto holder = ctx->saved_data["state"].toCapsule();
    auto* state = static_cast<Recompute*>(holder.get());
    const std::size_t n = state->params.size();

    // An offloaded input comes back from pinned memory (started while the layer above was
    // recomputed), ordered before the recomputation on the current stream.
    torch::Tensor x_in =
        state->offload ? state->offload->take(state->offload_slot) : ctx->get_saved_variables()[0].detach();
    const bool x_needs_grad = ctx->needs_input_grad(0);
    x_in.requires_grad_(x_needs_grad);
    variable_list wrt;        // what to differentiate with respect to
    std::vector<int> slot;    // its gradient slot in the result
    if (x_needs_grad) {
      wrt.push_back(x_in);
      slot.push_back(0);
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (!ctx->needs_input_grad(i + 1)) continue;
      wrt.push_back(state->params[i]);
      slot.push_back(static_cast<int>(i + 1));
    }
    variable_list result(n + 2);  // x, params..., state
    if (wrt.empty()) return result;

    torch::Tensor y;
    {
      RngReplay replay(state->rng, state->device);
      torch::AutoGradMode grad_on(true);
      y = state->fn(x_in);
    }
    FT_ASSERT(y.requires_grad(), "checkpoint: the recomputed output does not require grad");
    // grad(), not backward(): the parameters' gradients come back here and reach their .grad
    // through the outer backward's edges to their accumulators, exactly as without checkpointing.
    variable_list grads = torch::autograd::grad({y}, wrt, {grad_outputs[0]}, /*retain_graph=*/false,
                                                /*create_graph=*/false, /*allow_unused=*/true);
    for (std::size_t k = 0; k < wrt.size(); ++k) result[slot[k]] = grads[k];
    return result;
  }
};

}  // namespace

torch::Tensor checkpoint(const CheckpointFn& fn, const torch::Tensor& x, const std::vector<torch::Tensor>& params,
                         std::shared_ptr<OffloadedInputs> offload) {
  bool any_grad = x.requires_grad();
  for (const auto& p : params) any_grad = any_grad || p.requires_grad();
  if (!torch::GradMode::is_enabled() || !any_grad) return fn(x);
  auto state = c10::make_intrusive<Recompute>();
  state->fn = fn;
  state->params = params;
  state->offload = std::move(offload);
  return CheckpointFunction::apply(x, at::TensorList(params), std::move(state));
}

torch::Tensor checkpointed_layer(DecoderLayer& layer, const torch::Tensor& x, const LayerInputs& inputs,
                                 std::shared_ptr<OffloadedInputs> offload) {
  if (inputs.cache != nullptr || !torch::GradMode::is_enabled())
    return layer(x, inputs.cos, inputs.sin, inputs.mask, inputs.cache);
  FT_CHECK(!inputs.cos.requires_grad() && !inputs.sin.requires_grad() &&
               !(inputs.mask.bias.defined() && inputs.mask.bias.requires_grad()),
           "activation checkpointing: the rotary tables and the attention bias must not require grad");
  std::vector<torch::Tensor> params;
  for (const auto& p : layer->parameters())
    if (p.requires_grad()) params.push_back(p);
  // The lambda holds the layer (a shared pointer) and the inputs until backward has run.
  DecoderLayer held = layer;
  const torch::Tensor cos = inputs.cos, sin = inputs.sin;
  const AttentionMask mask = inputs.mask;
  return checkpoint([held, cos, sin, mask](const torch::Tensor& h) mutable { return held(h, cos, sin, mask, nullptr); },
                    x, params, std::move(offload));
}

LayerRunner activation_checkpointing_runner(InputOffload offload) {
  auto sessions = offload.enabled ? std::make_shared<OffloadSessions>(offload.prefetch) : nullptr;
  return [sessions](std::size_t index, DecoderLayer& layer, const torch::Tensor& x, const LayerInputs& inputs) {
    return checkpointed_layer(layer, x, inputs, sessions ? sessions->for_layer(index) : nullptr);
  };
}

}  // namespace ft::model
