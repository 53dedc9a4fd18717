#include "tools/train_config.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>

#include "optim/optimizer_json.h"
#include "runtime/errors.h"

namespace shardrt::tools {

using nlohmann::json;

json default_train_document() {
  // Parsed once: every load (and each --set) starts from a copy.
  static const json defaults = [] {
    json doc = json::parse(R"({
      "model": {"kind": "flare", "args": {}, "seed": 0},
      "precision": "f32",
      "device": "cpu",
      "loss": {"kind": "relative_l2", "huber_delta": 1.0, "units": "physical"},
      "data": {"train": "", "val": "", "batch_size": 1, "micro_batch": 0, "shuffle": true, "seed": 0,
               "normalize": true},
      "mesh": {"ddp": 1, "domain": 1},
      "steps": 0, "epochs": 0,
      "log": {"every": 10, "out_dir": "train-out", "plots": true, "panel_sample": 0, "progress_bar": "auto"},
      "validation": {"every": 0, "samples": 0},
      "checkpoint": {"dir": "", "every": 0, "best": true}
    })");
    doc.update(optim::default_optimizer_json());  // "optimizer" and "schedule", as the C API takes them too
    return doc;
  }();
  return defaults;
}

namespace {

std::string keys_of(const json& obj) {
  std::string out;
  for (auto it = obj.begin(); it != obj.end(); ++it) out += (out.empty() ? "" : ", ") + it.key();
  return out;
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
      SHARDRT_CHECK(optim::config_kind_matches(slot, *it), ValueError, "shardrt-train: ", origin, ": config key '", key, "' is ",
                    it->dump(), " but must be ", optim::config_kind_name(slot), " (like the default ", slot.dump(), ")");
      slot = *it;
    }
  }
}

// Through a JSON pointer nlohmann grows a list to whatever index it is given (a resize), and a missing value
// becomes a list when the next token is a number: "--set model.args.shape.99999999999=1" would allocate without
// bound, or throw std::length_error. A path through a list may name one of its elements or the slot just past its
// end (an append; for a list the path creates, its first element), nothing further. pointer: the path under
// model.args as a JSON pointer ("/shape/0"); its tokens are walked as nlohmann will walk them.
void check_list_indices(const json& args, const std::string& pointer, const std::string& assignment) {
  const json* at = &args;  // nullptr past the last existing value: what the rest of the path creates
  std::string walked = "model.args";
  for (size_t start = 1; start <= pointer.size();) {
    const size_t end = std::min(pointer.find('/', start), pointer.size());
    std::string token = pointer.substr(start, end - start);
    start = end + 1;
    for (size_t i; (i = token.find("~1")) != std::string::npos;) token.replace(i, 2, "/");
    for (size_t i; (i = token.find("~0")) != std::string::npos;) token.replace(i, 2, "~");
    const bool digits = std::all_of(token.begin(), token.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (at != nullptr && at->is_object()) {
      const auto it = at->find(token);
      at = it == at->end() ? nullptr : &*it;
    } else if (at == nullptr || at->is_array()) {
      if (at == nullptr && !digits) continue;  // a new object's key
      const size_t size = at == nullptr ? 0 : at->size();
      SHARDRT_CHECK(!token.empty() && token.size() <= 18 && digits, ValueError, "shardrt-train: --set '", assignment,
                    "': '", token, "' is not an index of the list ", walked, " (", size, " elements)");
      const size_t index = std::stoull(token);
      SHARDRT_CHECK(index <= size, ValueError, "shardrt-train: --set '", assignment, "': index ", token,
                    " is past the end of the list ", walked, " (", size, " elements; name one of them, or ", size,
                    " to append)");
      at = at == nullptr || index == size ? nullptr : &(*at)[index];
    } else {
      return;  // a path through a number or a string: the pointer reports it
    }
    walked += "." + token;
  }
}

}  // namespace

void apply_override(json& doc, const std::string& assignment) {
  try {
    // The merged document is written next to the run's metrics, and nlohmann cannot write a string that is not
    // UTF-8 (a bare-word value or a model.args key would make that write throw long after the check).
    (void)json(assignment).dump();
  } catch (const json::exception&) {
    throw ValueError("shardrt-train: --set '" + assignment + "' is not valid UTF-8");
  }
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
    std::string ptr = "/" + key.substr(std::string("model.args.").size());
    for (char& c : ptr) c = c == '.' ? '/' : c;
    check_list_indices(doc["model"]["args"], ptr, assignment);
    try {
      doc["model"]["args"][json::json_pointer(ptr)] = value;
    } catch (const json::exception& e) {  // a '~' that is no JSON-pointer escape, a path through a number
      throw ValueError("shardrt-train: --set '" + assignment + "': cannot set model.args." +
                       key.substr(std::string("model.args.").size()) + " (" + e.what() + ")");
    }
    return;
  }
  // Wrapped from the inside out by moving, not copying: a copy per level made a key of d parts cost d^2 (the
  // fuzzer's 2,500-part keys took seconds).
  json patch = std::move(value);
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    json level = json::object();
    level[*it] = std::move(patch);
    patch = std::move(level);
  }
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

  // Integers are read in the range the run can use: steps and epochs small enough that the loop's
  // epochs x batches-per-epoch cannot overflow, mesh sizes and batch sizes that fit an int, no negative counts.
  auto integer = [&](const json& v, const char* key, int64_t lo, int64_t hi) {
    return optim::config_integer(v, "shardrt-train", key, lo, hi);
  };
  auto seed_of = [&](const json& v, const char* key) -> uint64_t {
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    return static_cast<uint64_t>(integer(v, key, 0, INT64_MAX));
  };
  TrainConfig c;
  c.document = doc;
  c.model_kind = doc["model"]["kind"].get<std::string>();
  c.model_args = doc["model"]["args"];
  c.model_seed = seed_of(doc["model"]["seed"], "model.seed");
  const std::string precision = doc["precision"].get<std::string>();
  SHARDRT_CHECK(precision == "f32" || precision == "f64" || precision == "bf16-autocast" ||
                    precision == "f16-autocast",
                ValueError, "shardrt-train: precision '", precision,
                "' must be f32, f64, bf16-autocast or f16-autocast");
  c.dtype = precision == "f64" ? DType::f64 : DType::f32;
  // bf16-autocast / f16-autocast: f32 parameters, data and optimizer (the master weights); forward and backward
  // under an Autocast scope, so the matmul-class ops multiply 16-bit operands with f32 accumulation.
  if (precision == "bf16-autocast") c.autocast = DType::bf16;
  if (precision == "f16-autocast") c.autocast = DType::f16;
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
  const std::string units = doc["loss"]["units"].get<std::string>();
  SHARDRT_CHECK(units == "physical" || units == "normalized", ValueError, "shardrt-train: loss.units '", units,
                "' must be physical or normalized");
  c.loss_physical_units = units == "physical";

  const json& d = doc["data"];
  c.train_manifest = d["train"].get<std::string>();
  c.val_manifest = d["val"].get<std::string>();
  SHARDRT_CHECK(!c.train_manifest.empty(), ValueError,
                "shardrt-train: data.train (the training split's manifest, darcy_train.json) is required");
  c.batch_size = integer(d["batch_size"], "data.batch_size", 1, INT32_MAX);
  c.shuffle = d["shuffle"].get<bool>();
  c.data_seed = seed_of(d["seed"], "data.seed");
  c.normalize = d["normalize"].get<bool>();

  c.ddp = static_cast<int>(integer(doc["mesh"]["ddp"], "mesh.ddp", 1, INT32_MAX));
  c.domain = static_cast<int>(integer(doc["mesh"]["domain"], "mesh.domain", 1, INT32_MAX));
  SHARDRT_CHECK(c.ddp >= 1 && c.domain >= 1, ValueError, "shardrt-train: mesh.ddp and mesh.domain must be >= 1");
  SHARDRT_CHECK(c.batch_size >= 1 && c.batch_size % c.ddp == 0, ValueError, "shardrt-train: data.batch_size ",
                c.batch_size, " must be a positive multiple of mesh.ddp ", c.ddp,
                " (each ddp group takes its own samples)");
  const int64_t share = c.batch_size / c.ddp;  // samples per ddp group per step
  c.micro_batch = integer(d["micro_batch"], "data.micro_batch", 0, INT32_MAX);
  if (c.micro_batch == 0) c.micro_batch = share;
  SHARDRT_CHECK(share % c.micro_batch == 0, ValueError, "shardrt-train: data.micro_batch ", c.micro_batch,
                " must divide each ddp group's share of the batch, data.batch_size / mesh.ddp = ", share,
                " (0: all ", share, " in one forward)");
  c.optimizer.accumulation_steps = static_cast<int>(share / c.micro_batch);

  c.steps = integer(doc["steps"], "steps", 0, INT32_MAX);
  c.epochs = integer(doc["epochs"], "epochs", 0, INT32_MAX);
  SHARDRT_CHECK(c.steps > 0 || c.epochs > 0, ValueError, "shardrt-train: set steps or epochs (both are 0)");
  c.log_every = std::max<int64_t>(1, integer(doc["log"]["every"], "log.every", 0, INT64_MAX));
  c.out_dir = doc["log"]["out_dir"].get<std::string>();
  c.plots = doc["log"]["plots"].get<bool>();
  c.panel_sample = integer(doc["log"]["panel_sample"], "log.panel_sample", 0, INT64_MAX);
  c.progress_bar = doc["log"]["progress_bar"].get<std::string>();
  SHARDRT_CHECK(c.progress_bar == "auto" || c.progress_bar == "on" || c.progress_bar == "off", ValueError,
                "shardrt-train: log.progress_bar '", c.progress_bar, "' must be auto, on or off");
  c.val_every = integer(doc["validation"]["every"], "validation.every", 0, INT64_MAX);
  c.val_samples = integer(doc["validation"]["samples"], "validation.samples", 0, INT64_MAX);
  c.checkpoint_dir = doc["checkpoint"]["dir"].get<std::string>();
  if (c.checkpoint_dir.empty()) c.checkpoint_dir = c.out_dir + "/checkpoint";
  c.checkpoint_every = integer(doc["checkpoint"]["every"], "checkpoint.every", 0, INT64_MAX);
  c.keep_best = doc["checkpoint"]["best"].get<bool>();
  return c;
}

}  // namespace shardrt::tools
