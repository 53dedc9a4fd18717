#include "optim/optimizer_json.h"

#include <cstdint>

#include "runtime/errors.h"

namespace shardrt::optim {

using nlohmann::json;

json default_optimizer_json() {
  return json::parse(R"({
    "optimizer": {"algorithm": "adamw", "lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 1e-4,
                  "momentum": 0.0, "nesterov": false, "muon_lr": 0.02, "mode": "replicated", "max_grad_norm": 0.0},
    "schedule": {"kind": "constant", "warmup_steps": 0, "start_factor": 0.01, "min_factor": 0.0, "step_size": 1,
                 "gamma": 0.1, "pct_start": 0.3, "div_factor": 25.0, "final_div_factor": 10000.0}
  })");
}

namespace {

// A section handed in directly (a C++ caller, not a front end that merged it over the defaults) must still hold
// exactly the defaults' keys, each of the default's JSON type: a missing key, a misspelt one or a string where a
// number belongs is a ValueError naming the key, never a JSON library exception or a silently ignored setting.
void check_section(const json& got, const std::string& section, const std::string& who) {
  const json defaults = default_optimizer_json().at(section);
  std::string keys;
  for (auto it = defaults.begin(); it != defaults.end(); ++it) keys += (keys.empty() ? "" : ", ") + it.key();
  SHARDRT_CHECK(got.is_object(), ValueError, who, ": the '", section, "' section must be a JSON object, got ",
                got.dump());
  for (auto it = got.begin(); it != got.end(); ++it)
    SHARDRT_CHECK(defaults.contains(it.key()), ValueError, who, ": unknown key '", section, ".", it.key(),
                  "'; the keys of '", section, "' are: ", keys);
  for (auto it = defaults.begin(); it != defaults.end(); ++it) {
    SHARDRT_CHECK(got.contains(it.key()), ValueError, who, ": the key '", section, ".", it.key(),
                  "' is missing (merge the section over default_optimizer_json(); its default is ", it->dump(), ")");
    const json& v = got.at(it.key());
    const bool same = it->is_number() ? v.is_number() : v.type() == it->type();
    SHARDRT_CHECK(same, ValueError, who, ": '", section, ".", it.key(), "' is ", v.dump(), " but must be a ",
                  it->type_name(), " (like the default ", it->dump(), ")");
  }
}

}  // namespace

OptimizerConfig optimizer_config_from_json(const json& o, const std::string& who) {
  check_section(o, "optimizer", who);
  OptimizerConfig c;
  c.algorithm = parse_algorithm(o.at("algorithm").get<std::string>());
  SHARDRT_CHECK(o.at("betas").is_array() && o["betas"].size() == 2 && o["betas"][0].is_number() &&
                    o["betas"][1].is_number(),
                ValueError, who, ": optimizer.betas must be [beta1, beta2] (two numbers), got ", o["betas"].dump());
  const double lr = o.at("lr").get<double>();
  c.adamw.lr = lr;
  c.adamw.beta1 = o["betas"][0].get<double>();
  c.adamw.beta2 = o["betas"][1].get<double>();
  c.adamw.eps = o.at("eps").get<double>();
  c.adamw.weight_decay = o.at("weight_decay").get<double>();
  c.sgd.lr = lr;  // one rate for whichever rule runs (Muon's matrices have their own)
  c.sgd.momentum = o.at("momentum").get<double>();
  c.sgd.nesterov = o.at("nesterov").get<bool>();
  c.sgd.weight_decay = c.adamw.weight_decay;
  c.muon.lr = o.at("muon_lr").get<double>();
  c.mode = parse_sharding_mode(o.at("mode").get<std::string>());
  c.max_grad_norm = o.at("max_grad_norm").get<double>();
  return c;
}

std::shared_ptr<Schedule> schedule_from_json(const json& s, int64_t total_steps, const std::string& who) {
  check_section(s, "schedule", who);
  const std::string kind = s.at("kind").get<std::string>();
  if (kind == "constant") return constant_schedule();
  if (kind == "warmup_cosine")
    return warmup_cosine_schedule(s.at("warmup_steps").get<int64_t>(), total_steps, s.at("start_factor").get<double>(),
                                  s.at("min_factor").get<double>());
  if (kind == "step") return step_schedule(s.at("step_size").get<int64_t>(), s.at("gamma").get<double>());
  if (kind == "one_cycle")
    return one_cycle_schedule(total_steps, s.at("pct_start").get<double>(), s.at("div_factor").get<double>(),
                              s.at("final_div_factor").get<double>());
  throw ValueError(who + ": schedule.kind '" + kind + "' is not one of constant, warmup_cosine, step, one_cycle");
}

bool config_kind_matches(const json& want, const json& got) {
  if (want.is_null()) return true;
  if (want.is_number_float()) return got.is_number();
  if (want.is_number()) return got.is_number_integer();  // signed or unsigned, never a float
  return want.type() == got.type();
}

std::string config_kind_name(const json& want) {
  if (want.is_number_integer()) return "an integer";
  const std::string name = want.type_name();
  return (name[0] == 'a' || name[0] == 'o' ? "an " : "a ") + name;  // an array, an object, a number, a string
}

int64_t config_integer(const json& v, const std::string& who, const std::string& key, int64_t lo, int64_t hi) {
  // An unsigned value past INT64_MAX would wrap in get<int64_t>(); it is out of every range asked here.
  const bool fits = v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX));
  const int64_t x = fits ? v.get<int64_t>() : 0;
  SHARDRT_CHECK(fits && x >= lo && x <= hi, ValueError, who, ": config key '", key, "' is ", v.dump(),
                " but must be an integer in [", lo, ", ", hi, "]");
  return x;
}

}  // namespace shardrt::optim
