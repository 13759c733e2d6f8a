// Hugging Face generation_config.json: the ids that end generation. Instruct models list more
// than config.json does (Llama 3.1 Instruct: eos_token_id [128001, 128008, 128009], where
// config.json names only 128001), and transformers' generate() stops at any of them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ft::io {

// eos_token_id of MODEL_DIR/generation_config.json (one id or a list); empty when the file or
// the key is absent. A malformed file or value is an ft::Error naming the file and the key.
std::vector<std::int64_t> generation_eos_ids(const std::string& model_dir);

}  // namespace ft::io
