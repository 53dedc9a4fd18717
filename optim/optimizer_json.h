// The "optimizer" and "schedule" sections of a JSON config, as shardrt-train's config files and the C API's
// optimizer documents both write them (docs/training.md): one reader, so the two front ends cannot drift apart.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "optim/optimizer_config.h"
#include "optim/schedule.h"

namespace shardrt::optim {

// {"optimizer": {...}, "schedule": {...}}: every key the two sections take, with its default (a front end merges
// the user's keys over these, refusing unknown ones).
nlohmann::json default_optimizer_json();

// An "optimizer" section with every key present (merged over the defaults) -> the config's algorithm, rates,
// betas, eps, weight decay, momentum / Nesterov, Muon's rate, sharding mode and clipping norm. Accumulation and the
// schedule are the caller's. ValueError naming `who` for a bad algorithm, mode or betas.
OptimizerConfig optimizer_config_from_json(const nlohmann::json& optimizer, const std::string& who);

// A "schedule" section with every key present -> the schedule (constant, warmup_cosine, step, one_cycle);
// `total_steps` is the run's length, for the schedules that span it. ValueError naming `who` for another kind.
std::shared_ptr<Schedule> schedule_from_json(const nlohmann::json& schedule, int64_t total_steps,
                                             const std::string& who);

// May `got` replace the default `want` of a config document (the front ends' key-by-key merge)? Same JSON kind,
// except that a floating default takes any number, an integer default only an integer (1.5 or 1e300 where a step
// count belongs is an error, not a truncating or undefined float-to-integer cast), and a null default anything.
bool config_kind_matches(const nlohmann::json& want, const nlohmann::json& got);
// What config_kind_matches wants, for messages: "an integer", "a number", "a string", "an array", ...
std::string config_kind_name(const nlohmann::json& want);

// An integer config value `key` in [lo, hi] (a count of steps that would overflow the loop's arithmetic, a mesh
// size past int): ValueError naming `who` and the key otherwise.
int64_t config_integer(const nlohmann::json& value, const std::string& who, const std::string& key, int64_t lo,
                       int64_t hi);

}  // namespace shardrt::optim
