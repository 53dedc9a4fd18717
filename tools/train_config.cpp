#include "tools/train_config.h"

#include <fstream>
#include <sstream>

#include "optim/optimizer_json.h"
#include "runtime/errors.h"

namespace shardrt::tools {

using nlohmann::json;

json default_train_document() {
  json doc = json::parse(R"({
    "model": {"kind": "flare", "args": {}, "seed": 0},
    "precision": "f32",
    "device": "cpu",
    "loss": {"kind": "relative_l2", "huber_delta": 1.0},
    "data": {"train": "", "val": "", "batch_size": 1, "shuffle": true, "seed": 0, "normalize": true},
    "mesh": {"ddp": 1, "domain": 1},
    "steps": 0, "epochs": 0,
    "log": {"every": 10, "out_dir": "train-out", "plots": true, "panel_sample": 0, "progress_bar": "auto"},
    "validation": {"every": 0, "samples": 0},
    "checkpoint": {"dir": "", "every": 0}
  })");
  doc.update(optim::default_optimizer_json());  // "optimizer" and "schedule", as the C API takes them too
  return doc;
}

namespace {

std::string keys_of(const json& obj) {
  std::string out;
  for (auto it = obj.begin(); it != obj.end(); ++it) out += (out.empty() ? "" : ", ") + it.key();
  return out;
}

bool same_kind(const json& want, const json& got) {
  if (want.is_null()) return true;
  if (want.is_number()) return got.is_number();
  return want.type() == got.type();
}

// Merges `src` into `dst` key by key; `where` names the position for errors ("optimizer.").
void merge_checked(json& dst, const json& src, const std::string& where, const std::string& origin) {
  SHARDRT_CHECK(src.is_object(), ValueError, "shardrt-train: ", origin, ": '", where.empty() ? "(top)" : where,
                "' must be a JSON object");
  for (auto it = src.begin(); it != src.end(); ++it) {
    const std::string key = where + it.key();
    SHARDRT_CHECK(dst.contains(it.key()), ValueError, "shardrt-train: ", origin, ": unknown config key '", key,
                  "'; the keys", where.empty() ? "" : " of '" + where.substr(0, where.size() - 1) + "'", " are: ",
                  keys_of(dst));
    json& slot = dst[it.key()];
    if (key == "model.args") {  // the model's own constructor arguments: build_model checks them
      SHARDRT_CHECK(it->is_object(), ValueError, "shardrt-train: ", origin, ": 'model.args' must be an object");
      slot = *it;
    } else if (slot.is_object()) {
      merge_checked(slot, *it, key + ".", origin);
    } else {
      SHARDRT_CHECK(same_kind(slot, *it), ValueError, "shardrt-train: ", origin, ": config key '", key, "' is ",
                    it->dump(), " but must be a ", slot.type_name(), " (like the default ", slot.dump(), ")");
      slot = *it;
    }
  }
}

}  // namespace

void apply_override(json& doc, const std::string& assignment) {
  const auto eq = assignment.find('=');
  SHARDRT_CHECK(eq != std::string::npos && eq > 0, ValueError, "shardrt-train: --set '", assignment,
                "' is not KEY=VALUE (for example --set optimizer.lr=1e-3)");
  const std::string key = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  json value;
  try {
    value = json::parse(text);
  } catch (const std::exception&) {
    value = text;  // a bare word: a string (--set data.train=run/darcy_train.json)
  }
  // Build {"a": {"b": value}} and merge it with the same checks as a file's keys; model.args.x lands in args.
  std::vector<std::string> parts;
  std::stringstream in(key);
  for (std::string p; std::getline(in, p, '.');) parts.push_back(p);
  if (parts.size() > 2 && parts[0] == "model" && parts[1] == "args") {
    std::string rest = key.substr(std::string("model.args.").size());
    doc["model"]["args"][json::json_pointer("/" + [&] {
      std::string ptr = rest;
      for (char& c : ptr) c = c == '.' ? '/' : c;
      return ptr;
    }())] = value;
    return;
  }
  json patch = value;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) patch = json{{*it, patch}};
  merge_checked(doc, patch, "", "--set " + assignment);
}

const char* loss_name(LossKind k) {
  switch (k) {
    case LossKind::relative_l2: return "relative_l2";
    case LossKind::mse: return "mse";
    case LossKind::huber: return "huber";
  }
  return "?";
}

TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides) {
  json doc = default_train_document();
  if (!path.empty()) {
    std::ifstream f(path);
    SHARDRT_CHECK(f.good(), IoError, "shardrt-train: cannot open the config file '", path, "'");
    json file;
    try {
      file = json::parse(f);
    } catch (const std::exception& e) {
      throw IoError("shardrt-train: the config file '" + path + "' is not valid JSON: " + e.what());
    }
    merge_checked(doc, file, "", path);
  }
  for (const std::string& o : overrides) apply_override(doc, o);

  TrainConfig c;
  c.document = doc;
  c.model_kind = doc["model"]["kind"].get<std::string>();
  c.model_args = doc["model"]["args"];
  c.model_seed = doc["model"]["seed"].get<uint64_t>();
  const std::string precision = doc["precision"].get<std::string>();
  SHARDRT_CHECK(precision == "f32" || precision == "f64", ValueError, "shardrt-train: precision '", precision,
                "' must be f32 or f64");
  c.dtype = precision == "f64" ? DType::f64 : DType::f32;
  // "device": where the model, each batch and the optimizer live ("cpu" or "cuda:N"; one device per rank).
  const std::string device = doc["device"].get<std::string>();
  c.device = Device::parse(device);

  const json& o = doc["optimizer"];
  c.optimizer = optim::optimizer_config_from_json(o, "shardrt-train");
  c.base_lr = o["lr"].get<double>();
  c.schedule = doc["schedule"];

  const std::string loss = doc["loss"]["kind"].get<std::string>();
  if (loss == "relative_l2") c.loss = LossKind::relative_l2;
  else if (loss == "mse") c.loss = LossKind::mse;
  else if (loss == "huber") c.loss = LossKind::huber;
  else throw ValueError("shardrt-train: loss.kind '" + loss + "' is not one of relative_l2, mse, huber");
  c.huber_delta = doc["loss"]["huber_delta"].get<double>();
  SHARDRT_CHECK(c.huber_delta > 0, ValueError, "shardrt-train: loss.huber_delta must be > 0, got ", c.huber_delta);

  const json& d = doc["data"];
  c.train_manifest = d["train"].get<std::string>();
  c.val_manifest = d["val"].get<std::string>();
  SHARDRT_CHECK(!c.train_manifest.empty(), ValueError,
                "shardrt-train: data.train (the training split's manifest, darcy_train.json) is required");
  c.batch_size = d["batch_size"].get<int64_t>();
  c.shuffle = d["shuffle"].get<bool>();
  c.data_seed = d["seed"].get<uint64_t>();
  c.normalize = d["normalize"].get<bool>();

  c.ddp = doc["mesh"]["ddp"].get<int>();
  c.domain = doc["mesh"]["domain"].get<int>();
  SHARDRT_CHECK(c.ddp >= 1 && c.domain >= 1, ValueError, "shardrt-train: mesh.ddp and mesh.domain must be >= 1");
  SHARDRT_CHECK(c.batch_size >= 1 && c.batch_size % c.ddp == 0, ValueError, "shardrt-train: data.batch_size ",
                c.batch_size, " must be a positive multiple of mesh.ddp ", c.ddp,
                " (each ddp group takes one sample per micro-batch)");
  c.optimizer.accumulation_steps = static_cast<int>(c.batch_size / c.ddp);

  c.steps = doc["steps"].get<int64_t>();
  c.epochs = doc["epochs"].get<int64_t>();
  SHARDRT_CHECK(c.steps > 0 || c.epochs > 0, ValueError, "shardrt-train: set steps or epochs (both are 0)");
  c.log_every = std::max<int64_t>(1, doc["log"]["every"].get<int64_t>());
  c.out_dir = doc["log"]["out_dir"].get<std::string>();
  c.plots = doc["log"]["plots"].get<bool>();
  c.panel_sample = doc["log"]["panel_sample"].get<int64_t>();
  c.progress_bar = doc["log"]["progress_bar"].get<std::string>();
  SHARDRT_CHECK(c.progress_bar == "auto" || c.progress_bar == "on" || c.progress_bar == "off", ValueError,
                "shardrt-train: log.progress_bar '", c.progress_bar, "' must be auto, on or off");
  c.val_every = doc["validation"]["every"].get<int64_t>();
  c.val_samples = doc["validation"]["samples"].get<int64_t>();
  c.checkpoint_dir = doc["checkpoint"]["dir"].get<std::string>();
  if (c.checkpoint_dir.empty()) c.checkpoint_dir = c.out_dir + "/checkpoint";
  c.checkpoint_every = doc["checkpoint"]["every"].get<int64_t>();
  return c;
}

}  // namespace shardrt::tools
