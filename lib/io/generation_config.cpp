#include "io/generation_config.h"

#include "util/error.h"
#include "util/file_util.h"
#include "util/json.h"

namespace ft::io {

std::vector<std::int64_t> generation_eos_ids(const std::string& model_dir) {
  const std::string file = join_path(model_dir, "generation_config.json");
  if (!file_exists(file)) return {};
  const Json json = parse_json_file(file, 16);
  FT_CHECK(json.is_object(), file, ": expected a JSON object, got ", describe_json(json));
  if (!json.contains("eos_token_id") || json["eos_token_id"].is_null()) return {};
  const Json& eos = json["eos_token_id"];
  std::vector<std::int64_t> ids;
  for (const Json& id : eos.is_array() ? eos : Json::array({eos})) {
    FT_CHECK(id.is_number_integer() && id.get<std::int64_t>() >= 0, file,
             ": eos_token_id: expected a token id or a list of them, got ", describe_json(eos));
    ids.push_back(id.get<std::int64_t>());
  }
  return ids;
}

}  // namespace ft::io
