// LoRA on the model: target selection, seeded init, freezing, merging, and fitting PEFT adapter
// tensors to the model with errors that say which tensor does not fit and what was expected.
#include "model/lora.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <map>
#include <regex>
#include <set>

#include "config/run_config.h"
#include "io/tensor_shape.h"
#include "util/error.h"

namespace ft::model {
namespace {

using io::shape_string;

const char* const kHint = " (hint: is this adapter for another base model?)";

std::string leaf_name(const std::string& module) { return module.substr(module.rfind('.') + 1); }

std::string known_projections() {
  std::string s;
  for (const auto& name : io::llama_linear_modules()) s += (s.empty() ? "" : ", ") + name;
  return s;
}

void check_no_lora(const std::vector<NamedProjection>& all) {
  for (const auto& [name, linear] : all)
    FT_CHECK(!linear->has_lora(), "the model already has LoRA on '", name,
             "'; merge it (merge_lora) before adding another adapter");
}

// The projections `targets` selects; throws when a name is not a projection or nothing matches.
// `source` (a file, or "") prefixes the messages.
std::vector<NamedProjection> select(const std::vector<NamedProjection>& all, const io::LoraTargets& targets,
                               const std::string& source) {
  const std::string where = source.empty() ? "" : source + ": ";
  if (targets.regex.empty() && !targets.all_linear()) {
    const auto& kinds = io::llama_linear_modules();
    for (const auto& name : targets.names)
      FT_CHECK(std::find(kinds.begin(), kinds.end(), leaf_name(name)) != kinds.end(), where, "target_modules: \"", name,
               "\" is not a projection LoRA can apply to (expected some of ", known_projections(), ", or all-linear)");
  }
  std::vector<NamedProjection> selected;
  for (const auto& p : all)
    if (targets.matches(p.first)) selected.push_back(p);
  FT_CHECK(!selected.empty(), where, "target_modules (", targets.describe(), ") selects no module of the model (LoRA applies to ",
           known_projections(), " in model.layers.N)");
  return selected;
}

// Enables the branch on `selected` and freezes the base: only LoRA weights keep requires_grad.
void enable(LlamaForCausalLM& model, const std::vector<NamedProjection>& selected, const LoraOptions& options) {
  FT_CHECK(options.r > 0, "LoRA rank r must be positive, got ", options.r);
  for (auto& p : model->parameters()) p.requires_grad_(false);
  for (const auto& [name, linear] : selected) {
    linear->enable_lora(options.r, options.scale(), options.dropout);
    linear->lora_A->weight.requires_grad_(true);
    linear->lora_B->weight.requires_grad_(true);
  }
}

}  // namespace

double LoraOptions::scale() const {
  return use_rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r);
}

LoraOptions lora_options(const config::LoraConfig& config) {
  LoraOptions o;
  o.r = config.r;
  o.alpha = config.alpha;
  o.dropout = config.dropout;
  o.targets = io::LoraTargets{config.target_modules, ""};
  o.use_rslora = config.use_rslora;
  return o;
}

LoraOptions lora_options(const io::PeftAdapterConfig& config) {
  LoraOptions o;
  o.r = config.r;
  o.alpha = config.lora_alpha;
  o.dropout = config.lora_dropout;
  o.targets = config.target_modules;
  o.use_rslora = config.use_rslora;
  return o;
}

io::PeftAdapterConfig peft_adapter_config(const LoraOptions& options, const std::string& base_model_name_or_path) {
  io::PeftAdapterConfig c;
  c.r = options.r;
  c.lora_alpha = options.alpha;
  c.lora_dropout = options.dropout;
  c.target_modules = options.targets;
  c.use_rslora = options.use_rslora;
  c.base_model_name_or_path = base_model_name_or_path;
  return c;
}

std::vector<std::string> apply_lora(LlamaForCausalLM& model, const LoraOptions& options, std::uint64_t seed) {
  auto all = named_projections(model);
  check_no_lora(all);
  auto selected = select(all, options.targets, "");
  enable(model, selected, options);
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(seed);
  const double a = std::sqrt(5.0);  // torch.nn.init.kaiming_uniform_(w, a=math.sqrt(5)) as PEFT calls it
  std::vector<std::string> names;
  for (const auto& [name, linear] : selected) {
    const auto fan_in = static_cast<double>(linear->in_features());
    const double bound = std::sqrt(3.0) * std::sqrt(2.0 / (1.0 + a * a)) / std::sqrt(fan_in);  // = 1/sqrt(in)
    auto init = torch::empty(linear->lora_A->weight.sizes(), torch::kFloat).uniform_(-bound, bound, gen);
    linear->lora_A->weight.copy_(init);
    linear->lora_B->weight.zero_();
    names.push_back(name);
  }
  return names;
}

bool has_lora(LlamaForCausalLM& model) {
  for (const auto& p : named_projections(model))
    if (p.second->has_lora()) return true;
  return false;
}

io::NamedTensors lora_parameters(LlamaForCausalLM& model) {
  io::NamedTensors out;
  for (const auto& [name, linear] : named_projections(model)) {
    if (!linear->has_lora()) continue;
    out.emplace_back(name + ".lora_A.weight", linear->lora_A->weight);
    out.emplace_back(name + ".lora_B.weight", linear->lora_B->weight);
  }
  return out;
}

io::NamedTensors lora_adapter_tensors(LlamaForCausalLM& model) {
  io::NamedTensors out;
  for (const auto& [name, tensor] : lora_parameters(model))
    out.emplace_back(name, tensor.detach().to(torch::kCPU, torch::kFloat, /*non_blocking=*/false, /*copy=*/true));
  return out;
}

void merge_lora(LlamaForCausalLM& model) {
  torch::NoGradGuard no_grad;
  const c10::ScalarType dtype = model->output_weight().scalar_type();
  for (const auto& [name, linear] : named_projections(model)) {
    if (!linear->has_lora()) continue;
    linear->dequantize_weight(dtype);  // a quantized base: merge into its dequantized values
    auto delta = torch::mm(linear->lora_B->weight.to(torch::kFloat), linear->lora_A->weight.to(torch::kFloat));
    auto merged = linear->weight.to(torch::kFloat) + delta * linear->lora_scale();
    linear->weight.copy_(merged);  // cast back to the base dtype once
    linear->disable_lora();
  }
}

LoraOptions load_adapter(LlamaForCausalLM& model, const std::string& dir) {
  io::PeftAdapter adapter = io::read_peft_adapter(dir);
  const std::string& file = adapter.weights_path;
  const std::string config_file = dir + "/" + io::kAdapterConfigFile;
  LoraOptions options = lora_options(adapter.config);
  const std::int64_t r = options.r;

  auto all = named_projections(model);
  check_no_lora(all);
  auto selected = select(all, adapter.config.target_modules, config_file);
  std::map<std::string, std::shared_ptr<LinearImpl>> by_name(all.begin(), all.end());
  // module -> (lora_A, lora_B)
  std::map<std::string, std::pair<torch::Tensor, torch::Tensor>> pairs;
  const std::int64_t layers = model->config().num_hidden_layers;
  static const std::regex layer_pattern(R"(^model\.layers\.(\d+)\..*)");
  for (const auto& [name, tensor] : adapter.tensors) {
    // read_peft_adapter guarantees the name ends in .lora_A.weight or .lora_B.weight (same length).
    const std::size_t suffix = std::string(".lora_A.weight").size();
    const bool is_a = name.compare(name.size() - suffix, suffix, ".lora_A.weight") == 0;
    const std::string module = name.substr(0, name.size() - suffix);
    auto it = by_name.find(module);
    if (it == by_name.end()) {
      std::smatch m;
      if (std::regex_match(name, m, layer_pattern)) {
        // More digits than any layer count has would overflow stoll: such a layer is out of range too.
        const long long index = m[1].length() > 9 ? std::numeric_limits<long long>::max() : std::stoll(m[1].str());
        FT_CHECK(index < layers, file, ": tensor '", name, "' is for layer ", m[1].str(), " but the model has ", layers,
                 " layers (0..", layers - 1, ")", kHint);
      }
      FT_CHECK(false, file, ": tensor '", name, "' is for module '", module,
               "', which the model does not have or LoRA cannot apply to (expected model.layers.N.self_attn.{q,k,v,o}_proj "
               "or model.layers.N.mlp.{gate,up,down}_proj)",
               kHint);
    }
    FT_CHECK(adapter.config.target_modules.matches(module), file, ": tensor '", name, "' is for module '", module,
             "', which target_modules (", adapter.config.target_modules.describe(), ") in ", config_file,
             " does not select");
    const auto& linear = it->second;
    const std::vector<std::int64_t> expected =
        is_a ? std::vector<std::int64_t>{r, linear->in_features()} : std::vector<std::int64_t>{linear->out_features(), r};
    FT_CHECK(tensor.sizes() == at::IntArrayRef(expected), file, ": tensor '", name, "' has shape ",
             shape_string(tensor.sizes()), " but expected ", shape_string(expected), " = ",
             is_a ? "[r, in_features]" : "[out_features, r]", " (r = ", r, " from ", config_file, ")", kHint);
    (is_a ? pairs[module].first : pairs[module].second) = tensor;
  }
  for (const auto& [module, ab] : pairs) {
    FT_CHECK(ab.second.defined(), file, ": tensor '", module, ".lora_A.weight' has no matching '", module,
             ".lora_B.weight'");
    FT_CHECK(ab.first.defined(), file, ": tensor '", module, ".lora_B.weight' has no matching '", module,
             ".lora_A.weight'");
  }
  for (const auto& [name, linear] : selected)
    FT_CHECK(pairs.count(name), file, ": no LoRA weights for '", name, "', which target_modules (",
             adapter.config.target_modules.describe(), ") in ", config_file, " selects", kHint);

  enable(model, selected, options);
  torch::NoGradGuard no_grad;
  for (const auto& [name, linear] : selected) {
    linear->lora_A->weight.copy_(pairs[name].first);
    linear->lora_B->weight.copy_(pairs[name].second);
  }
  return options;
}

void save_adapter(LlamaForCausalLM& model, const LoraOptions& options, const std::string& dir,
                  const std::string& base_model_name_or_path) {
  save_adapter(lora_adapter_tensors(model), options, dir, base_model_name_or_path);
}

void save_adapter(const io::NamedTensors& tensors, const LoraOptions& options, const std::string& dir,
                  const std::string& base_model_name_or_path) {
  FT_CHECK(!tensors.empty(), dir, ": cannot save an adapter: the model has no LoRA weights");
  io::write_peft_adapter(dir, peft_adapter_config(options, base_model_name_or_path), tensors);
}

}  // namespace ft::model
