// The bundled TinyStories model (tests/data/stories260K), loaded anew on each call (the suites
// train or wrap it) in `dtype`, or as stored.
#pragma once

#include <optional>

#include "model/model_loader.h"
#include "test_support.h"

namespace ft::model {

inline LlamaForCausalLM load_stories(std::optional<c10::ScalarType> dtype = std::nullopt) {
  LoadOptions options;
  options.dtype = dtype;
  return load_llama(test::data_path("stories260K"), options);
}

}  // namespace ft::model
