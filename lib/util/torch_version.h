// The LibTorch version this file is compiled against, for the few places where its C++ API
// differs between the versions ft builds with (Debian's 1.13, a pip torch 2.x).
#pragma once

#include <torch/version.h>

#define FT_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))
