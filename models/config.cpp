#include "models/config.h"

#include <sstream>

#include "runtime/errors.h"

namespace shardrt::models {

ConfigReader::ConfigReader(std::string model, const Json& config) : model_(std::move(model)), config_(config) {
  SHARDRT_CHECK(config_.is_object() || config_.is_null(), ValueError, model_,
                " config: expected a JSON object of constructor arguments, got ", config_.type_name());
  if (config_.is_null()) config_ = Json::object();
}

const Json* ConfigReader::find(const std::string& key) {
  known_.insert(key);
  auto it = config_.find(key);
  return it == config_.end() ? nullptr : &*it;
}

void ConfigReader::type_error(const std::string& key, const char* expected, const Json& got) const {
  throw ValueError(model_ + " config: key '" + key + "' must be " + expected + ", got " + got.dump());
}

int64_t ConfigReader::integer(const std::string& key, int64_t fallback) {
  const Json* v = find(key);
  if (!v) return fallback;
  // JSON has one number type; an integral float (8.0) is accepted as Python would not, so reject it to be exact.
  if (!v->is_number_integer()) type_error(key, "an integer", *v);
  return v->get<int64_t>();
}

int64_t ConfigReader::integer(const std::string& key) {
  const Json* v = find(key);
  SHARDRT_CHECK(v != nullptr, ValueError, model_, " config: the required key '", key, "' is missing");
  if (!v->is_number_integer()) type_error(key, "an integer", *v);
  return v->get<int64_t>();
}

std::optional<int64_t> ConfigReader::optional_integer(const std::string& key, std::optional<int64_t> fallback) {
  const Json* v = find(key);
  if (!v) return fallback;
  if (v->is_null()) return std::nullopt;
  if (!v->is_number_integer()) type_error(key, "an integer or null", *v);
  return v->get<int64_t>();
}

double ConfigReader::number(const std::string& key, double fallback) {
  const Json* v = find(key);
  if (!v) return fallback;
  if (!v->is_number()) type_error(key, "a number", *v);
  return v->get<double>();
}

bool ConfigReader::boolean(const std::string& key, bool fallback) {
  const Json* v = find(key);
  if (!v) return fallback;
  if (!v->is_boolean()) type_error(key, "true or false", *v);
  return v->get<bool>();
}

std::string ConfigReader::string(const std::string& key, const std::string& fallback) {
  const Json* v = find(key);
  if (!v) return fallback;
  if (!v->is_string()) type_error(key, "a string", *v);
  return v->get<std::string>();
}

std::vector<int64_t> ConfigReader::integers(const std::string& key, const std::vector<int64_t>& fallback,
                                            bool scalar_ok) {
  const Json* v = find(key);
  if (!v) return fallback;
  if (scalar_ok && v->is_number_integer()) return {v->get<int64_t>()};
  if (!v->is_array()) type_error(key, scalar_ok ? "an integer or a list of integers" : "a list of integers", *v);
  std::vector<int64_t> out;
  for (const Json& e : *v) {
    if (!e.is_number_integer()) type_error(key, "a list of integers", *v);
    out.push_back(e.get<int64_t>());
  }
  return out;
}

std::optional<std::vector<int64_t>> ConfigReader::optional_integers(const std::string& key) {
  const Json* v = find(key);
  if (!v || v->is_null()) return std::nullopt;
  known_.erase(key);  // integers() re-inserts it
  return integers(key, {});
}

void ConfigReader::finish() const {
  std::vector<std::string> unknown;
  for (auto it = config_.begin(); it != config_.end(); ++it)
    if (!known_.count(it.key())) unknown.push_back(it.key());
  if (unknown.empty()) return;
  std::ostringstream os;
  os << model_ << " config: unknown key" << (unknown.size() > 1 ? "s" : "") << " ";
  for (size_t i = 0; i < unknown.size(); ++i) os << (i ? ", " : "") << "'" << unknown[i] << "'";
  os << "; the known keys are";
  for (const std::string& k : known_) os << " " << k;
  throw ValueError(os.str());
}

Json args_from_mdlus(const Json& args_json) {
  if (args_json.is_object() && args_json.contains("__args__")) return args_json.at("__args__");
  return args_json;
}

}  // namespace shardrt::models
