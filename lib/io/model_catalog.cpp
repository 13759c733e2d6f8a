// Looking a model's config.json up by folder, by Hugging Face name, or by folder name.
#include "io/model_catalog.h"

#include <algorithm>
#include <filesystem>

#include "util/error.h"
#include "util/file_util.h"

namespace ft::io {
namespace {

std::string last_component(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::vector<std::string> catalog_model_names(const std::string& catalog_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& org : std::filesystem::directory_iterator(catalog_dir, ec)) {
    if (!org.is_directory()) continue;
    std::error_code inner;
    for (const auto& model : std::filesystem::directory_iterator(org.path(), inner)) {
      if (file_exists((model.path() / "config.json").string())) {
        names.push_back(org.path().filename().string() + "/" + model.path().filename().string());
      }
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

ModelConfigFolder find_model_config(const std::string& path_or_name, const std::string& catalog_dir) {
  if (file_exists(join_path(path_or_name, "config.json"))) return {path_or_name, ""};
  const std::vector<std::string> names = catalog_model_names(catalog_dir);
  for (const std::string& name : names) {
    if (name == path_or_name) return {join_path(catalog_dir, name), ""};
  }
  const std::string wanted = last_component(path_or_name);
  for (const std::string& name : names) {
    if (last_component(name) == wanted) {
      return {join_path(catalog_dir, name),
              str(path_or_name, " is not here: planning with the bundled config.json of ", name, " (",
                  join_path(catalog_dir, name), ")")};
    }
  }
  std::string known;
  for (const std::string& name : names) known += str(known.empty() ? "" : ", ", name);
  throw Error(str(path_or_name, ": ", is_directory(path_or_name) ? "the folder has no config.json" : "not found",
                  ", and no model of that name is bundled in ", catalog_dir, " (",
                  known.empty() ? "none there" : known,
                  "). A plan needs only the model's config.json: point model.path at a folder with it (--set "
                  "model.path=...), name a bundled model (--model ORG/NAME), or add its config.json as ",
                  join_path(catalog_dir, "ORG/NAME/config.json")));
}

}  // namespace ft::io
