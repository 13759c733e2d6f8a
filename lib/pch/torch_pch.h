// The precompiled header every target shares: LibTorch's frontend and the standard library
// headers most files use. Only build flags may pull this in; sources include what they use.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>
