// "[4096, 32000]": how error messages write a tensor's shape.
#pragma once

#include <c10/util/ArrayRef.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace ft::io {

inline std::string shape_string(c10::ArrayRef<std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace ft::io
