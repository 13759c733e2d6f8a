// Shared by the JSON-config fuzz targets: parse the input as JSON the way ft reads files, then
// hand it to one parser. Any input must give a value or an ft::Error; never a crash, hang,
// uncaught exception or out-of-bounds read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "util/error.h"
#include "util/json.h"

template <typename Parse>
int fuzz_json(const std::uint8_t* data, std::size_t size, Parse parse) {
  try {
    const ft::Json json = ft::parse_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
    parse(json);
  } catch (const ft::Error&) {
  }
  return 0;
}
