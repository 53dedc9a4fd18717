// Model configs: JSON objects holding a PhysicsNeMo constructor's arguments, with its argument names and defaults.
//
// A ConfigReader hands out typed values key by key and, at finish(), rejects every key nobody asked for — so a
// misspelt argument is an error naming it (and listing the known ones), never silently a default. A JSON null is
// Python's None. Every error is a ValueError naming the model and the key.
#pragma once
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardrt::models {

using Json = nlohmann::json;

class ConfigReader {
 public:
  // `config` must be a JSON object (ValueError otherwise). PhysicsNeMo's .mdlus `args.json` wraps the arguments as
  // {"__name__", "__module__", "__args__": {...}}; pass the `__args__` object (see args_from_mdlus below).
  ConfigReader(std::string model, const Json& config);

  int64_t integer(const std::string& key, int64_t fallback);
  int64_t integer(const std::string& key);  // required
  std::optional<int64_t> optional_integer(const std::string& key, std::optional<int64_t> fallback = std::nullopt);
  double number(const std::string& key, double fallback);
  bool boolean(const std::string& key, bool fallback);
  std::string string(const std::string& key, const std::string& fallback);
  // A list (or tuple) of integers; a bare integer is accepted as a list of one only when `scalar_ok`.
  std::vector<int64_t> integers(const std::string& key, const std::vector<int64_t>& fallback, bool scalar_ok = false);
  std::optional<std::vector<int64_t>> optional_integers(const std::string& key);

  // Throws ValueError naming every key that no getter asked for.
  void finish() const;

  const std::string& model() const { return model_; }

 private:
  const Json* find(const std::string& key);
  [[noreturn]] void type_error(const std::string& key, const char* expected, const Json& got) const;

  std::string model_;
  Json config_;
  std::set<std::string> known_;
};

// The constructor arguments of a PhysicsNeMo .mdlus `args.json` (its "__args__" object), or the JSON itself when it
// is already a plain argument object.
Json args_from_mdlus(const Json& args_json);

}  // namespace shardrt::models
