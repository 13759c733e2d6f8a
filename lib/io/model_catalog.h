// The config.json of well-known models, shipped in configs/models/ORG/NAME/ (their Hugging Face
// names), so that a plan needs no download: ft_plan --model meta-llama/Llama-2-13b-hf, or a
// shipped run config whose model.path (models/Llama-2-13b-hf) is not on this machine.
#pragma once

#include <string>
#include <vector>

namespace ft::io {

// "ORG/NAME" of every folder under `catalog_dir` with a config.json, sorted.
std::vector<std::string> catalog_model_names(const std::string& catalog_dir);

struct ModelConfigFolder {
  std::string folder;  // holds config.json
  std::string note;    // "" when `path_or_name` was a folder with config.json; else what was used instead
};

// The folder whose config.json describes `path_or_name`: the folder itself when it has one; else
// the catalog's ORG/NAME when `path_or_name` is a Hugging Face name there; else the catalog entry
// whose NAME is the folder's last component (models/Llama-2-13b-hf -> meta-llama/Llama-2-13b-hf).
// Throws ft::Error naming the path, the catalog's models and how to point elsewhere.
ModelConfigFolder find_model_config(const std::string& path_or_name, const std::string& catalog_dir);

}  // namespace ft::io
