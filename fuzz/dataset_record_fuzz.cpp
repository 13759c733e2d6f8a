// libFuzzer target: dataset parsing as ft_prep does it — split a file into records, then parse
// and validate each record in every format. Any input must give records or ft::Errors; never a
// crash, hang or out-of-bounds read.
//   scripts/fuzz.sh dataset_record 60
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "data/dataset_file.h"
#include "data/dataset_record.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    for (const auto& raw : ft::data::split_records(text, "fuzz")) {
      for (auto format : {ft::data::RecordFormat::kAlpaca, ft::data::RecordFormat::kPromptCompletion,
                          ft::data::RecordFormat::kText, ft::data::RecordFormat::kChat}) {
        try {
          ft::data::parse_record(raw.text, format, raw.location);
        } catch (const ft::Error&) {
        }
      }
    }
  } catch (const ft::Error&) {
  }
  return 0;
}
