// What each input of a run is expected to be, and one message for all that are missing.
#include "train/run_inputs.h"

#include "data/tokenizer.h"
#include "io/weight_source.h"
#include "util/error.h"
#include "util/file_util.h"

namespace ft::train {
namespace {

const char* const kModelFolder =
    "a Hugging Face model folder: config.json, tokenizer.json or tokenizer.model, and model.safetensors or "
    "model.safetensors.index.json with its shards";
const char* const kDataFile =
    "a dataset: a JSON array or JSON Lines of records in data.format (alpaca: instruction, input, output; "
    "prompt_completion: prompt, completion; text: text; chat: messages)";
const char* const kAdapterFolder = "a PEFT LoRA adapter folder: adapter_config.json and adapter_model.safetensors";

}  // namespace

std::vector<MissingInput> find_missing_inputs(const config::RunConfig& config, const InputNeeds& needs) {
  std::vector<MissingInput> missing;
  const std::string& model = config.model.path;
  if (!is_directory(model)) {
    missing.push_back({"model.path", model, str("the folder does not exist; expected ", kModelFolder,
                                                " (e.g. huggingface-cli download ORG/NAME --local-dir ", model, ")")});
  } else {
    const std::string config_json = join_path(model, "config.json");
    if (!file_exists(config_json)) missing.push_back({"model.path", config_json, str("not there; expected ", kModelFolder)});
    const std::string tokenizer = data::tokenizer_file(model);
    if (!file_exists(tokenizer)) {
      missing.push_back({"model.path", tokenizer, "not there: ft reads the model's tokenizer.json or sentencepiece tokenizer.model"});
    }
    if (needs.weights && !io::has_safetensors_weights(model)) {
      missing.push_back({"model.path", join_path(model, "model.safetensors"),
                         "neither it nor model.safetensors.index.json is there: ft reads the weights as safetensors "
                         "(a .bin-only folder: convert it with transformers' save_pretrained(safe_serialization=True))"});
    }
  }
  if (!file_exists(config.data.train)) missing.push_back({"data.train", config.data.train, str("not there; expected ", kDataFile)});
  if (!config.data.eval.empty() && !file_exists(config.data.eval)) {
    missing.push_back({"data.eval", config.data.eval, str("not there; expected ", kDataFile, ", or no data.eval")});
  }
  if (config.lora && !config.lora->init_from.empty()) {
    const std::string& adapter = config.lora->init_from;
    for (const char* file : {"adapter_config.json", "adapter_model.safetensors"}) {
      if (!file_exists(join_path(adapter, file))) {
        missing.push_back({"lora.init_from", join_path(adapter, file), str("not there; expected ", kAdapterFolder)});
      }
    }
  }
  return missing;
}

void check_run_inputs(const config::RunConfig& config, const InputNeeds& needs) {
  const std::vector<MissingInput> missing = find_missing_inputs(config, needs);
  if (missing.empty()) return;
  std::string list;
  for (const MissingInput& m : missing) list += str("\n  ", m.key, ": ", m.path, ": ", m.expected);
  throw Error(str(config.source, ": ", missing.size(), missing.size() == 1 ? " input is" : " inputs are",
                  " missing (paths relative to ", current_directory(), "):", list,
                  "\nPoint the config at your files, in the file or with --set (e.g. --set model.path=/data/Llama-2-7b-hf "
                  "--set data.train=/data/train.jsonl)"));
}

}  // namespace ft::train
