#include <sstream>
#include <utility>

#include "models/flare.h"
#include "models/geotransolver.h"
#include "models/model.h"
#include "models/vit.h"
#include "runtime/errors.h"

namespace shardrt::models {

namespace {

// The bundled models, by registry name. Each builder lives with its model (models/<name>.cpp).
const std::vector<std::pair<std::string, ModelBuilder>>& registry() {
  static const std::vector<std::pair<std::string, ModelBuilder>> table = {
      {"vit", build_vit},
      {"flare", build_flare},
      {"geotransolver", build_geotransolver},
  };
  return table;
}

}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> out;
  for (const auto& [name, build] : registry()) out.push_back(name);
  return out;
}

std::unique_ptr<Model> build_model(const std::string& name, const Json& config, const ModelOptions& options) {
  for (const auto& [n, build] : registry())
    if (n == name) return build(config, options);
  std::ostringstream os;
  os << "build_model: unknown model '" << name << "'; the bundled models are";
  for (const auto& n : model_names()) os << " " << n;
  throw ValueError(os.str());
}

}  // namespace shardrt::models
