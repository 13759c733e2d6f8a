// The random generators a rank draws from while training (LoRA dropout masks: LibTorch's default
// CPU generator, and the device's on CUDA), as uint8 tensors a checkpoint stores per rank.
#pragma once

#include <c10/core/Device.h>

#include "io/safetensors.h"

namespace ft::checkpoint {

// "rng.cpu", and "rng.cuda" when `device` is a GPU.
io::NamedTensors capture_rng(c10::Device device);
// Sets the generators from tensors named as capture_rng names them; `source` names the file.
void restore_rng(const io::SafetensorsReader& file, c10::Device device);

}  // namespace ft::checkpoint
