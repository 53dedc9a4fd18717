// Writes the seed corpora of the libFuzzer targets (tools/fuzz corpus [TARGET...]): small valid files made by ShardRT's own
// writers, and hostile variants that aim at each check the readers make (lengths past the file, negative and
// overlapping offsets, wrong dtypes, duplicated keys, deep nesting, forbidden pickle globals, a deflate bomb).
// The files are committed under tests/fuzz/corpus/<target>/; rerun this after changing a writer.
#include <zip.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "optim/checkpoint_index.h"
#include "runtime/factories.h"
#include "runtime/mdlus_writer.h"
#include "runtime/pickle_writer.h"
#include "runtime/safetensors.h"
#include "runtime/zip_archive.h"

namespace fs = std::filesystem;
using namespace shardrt;
using Bytes = std::vector<unsigned char>;

namespace {

fs::path root;

void write(const std::string& target, const std::string& name, const Bytes& bytes) {
  fs::create_directories(root / target);
  std::ofstream f(root / target / name, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}
void write_text(const std::string& target, const std::string& name, const std::string& s) {
  write(target, name, Bytes(s.begin(), s.end()));
}
Bytes read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// A safetensors file with the given header text and data bytes (the length prefix computed, or forced).
Bytes safetensors_raw(const std::string& header, const Bytes& data, int64_t forced_length = -1) {
  Bytes out(8);
  const uint64_t n = forced_length >= 0 ? static_cast<uint64_t>(forced_length) : header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(n >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::map<std::string, Tensor> small_tensors() {
  return {{"enc.weight", from_vector({1, -2, 3.5, 4, 5, 6}, {2, 3})},
          {"enc.bias", from_vector({0.25, -0.5}, {2}, {DType::f64})},
          {"steps", from_vector({7}, {1}, {DType::i64})},
          {"mask", from_vector({1, 0, 1}, {3}, {DType::boolean})},
          {"half", from_vector({1, 2}, {2}, {DType::f16})},
          {"brain", from_vector({1, 2}, {1, 2}, {DType::bf16})},
          {"empty", zeros({0, 4})}};
}

void safetensors_seeds() {
  const fs::path tmp = root / "tmp.safetensors";
  save_safetensors(tmp.string(), small_tensors(), {{"format", "pt"}});
  write("safetensors", "valid-mixed-dtypes.safetensors", read_file(tmp));
  save_safetensors(tmp.string(), {{"x", zeros({1})}});
  write("safetensors", "valid-one-scalar.safetensors", read_file(tmp));
  fs::remove(tmp);
  const Bytes eight(8, 0);
  const Bytes sixteen(16, 1);
  auto st = [&](const char* name, const std::string& header, const Bytes& data, int64_t forced = -1) {
    write("safetensors", name, safetensors_raw(header, data, forced));
  };
  st("huge-header-length", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", eight, int64_t(1) << 62);
  st("header-length-past-file", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", eight, 4096);
  st("negative-offset", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", eight);
  st("end-before-begin", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", sixteen);
  st("offsets-past-data", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", eight);
  st("overlapping-ranges", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", sixteen);
  st("shape-size-mismatch", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight);
  st("wrong-dtype", R"({"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", eight);
  st("dtype-not-string", R"({"a":{"dtype":32,"shape":[2],"data_offsets":[0,8]}})", eight);
  st("negative-dim", R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight);
  st("shape-overflow", R"({"a":{"dtype":"F64","shape":[4294967296,4294967296,8],"data_offsets":[0,8]}})", eight);
  st("duplicate-key", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", sixteen);
  st("bool-not-0-1", R"({"m":{"dtype":"BOOL","shape":[8],"data_offsets":[0,8]}})", Bytes{0, 1, 2, 1, 0, 255, 1, 0});
  st("unaligned-f64", R"({"p":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"d":{"dtype":"F64","shape":[1],"data_offsets":[1,9]}})", Bytes(9, 3));
  st("metadata-not-strings", R"({"__metadata__":{"k":5},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", eight);
  st("header-not-object", R"([1,2,3])", eight);
  st("header-bad-utf8", std::string("{\"\xff\xfe\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}"), eight);
  st("deep-json", std::string(2000, '[') + std::string(2000, ']'), eight);
  st("extra-field", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", eight);
  write("safetensors", "truncated-length", Bytes{5, 0, 0});
}

// A zip (stored, or deflated for the bomb) of the given entries, written by libzip.
Bytes make_zip(const std::vector<std::pair<std::string, Bytes>>& entries, bool deflate = false) {
  const fs::path tmp = root / "tmp.zip";
  fs::remove(tmp);
  int err = 0;
  zip_t* z = zip_open(tmp.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
  for (const auto& [name, bytes] : entries) {
    zip_source_t* src = zip_source_buffer(z, bytes.data(), bytes.size(), 0);
    const zip_int64_t i = zip_file_add(z, name.c_str(), src, ZIP_FL_OVERWRITE);
    zip_set_file_compression(z, static_cast<zip_uint64_t>(i), deflate ? ZIP_CM_DEFLATE : ZIP_CM_STORE, 9);
  }
  zip_close(z);
  Bytes out = read_file(tmp);
  fs::remove(tmp);
  return out;
}

Bytes pickle_bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

Bytes data_pkl_of(const Bytes& torch_zip) {
  const ZipArchive z = ZipArchive::open_memory("seed", std::make_shared<const Bytes>(torch_zip));
  return z.read("archive/data.pkl", 1u << 20);
}

// A torch archive whose data.pkl is `pkl` and whose one storage is `data0`.
Bytes torch_zip_with_pickle(const Bytes& pkl, const Bytes& data0 = Bytes(8, 0)) {
  return make_zip({{"archive/data.pkl", pkl}, {"archive/byteorder", pickle_bytes("little")},
                   {"archive/data/0", data0}, {"archive/version", pickle_bytes("3")}});
}

void torch_zip_seeds() {
  OrderedTensors sd;
  for (auto& [k, v] : small_tensors()) sd.emplace_back(k, v);
  const Bytes pt = torch_zip_bytes(sd);
  write("torch_zip", "valid-state-dict.pt", pt);
  const nlohmann::json args = {{"__name__", "FLARE"}, {"__module__", "physicsnemo.models.flare.flare"},
                               {"__args__", {{"n_layers", 1}, {"n_hidden", 8}}}};
  write("torch_zip", "valid.mdlus", mdlus_bytes(sd, args));
  OrderedTensors ddp{{"module._orig_mod.enc.weight", from_vector({1, 2}, {2})}};
  write("torch_zip", "valid-ddp-prefixes.pt", torch_zip_bytes(ddp));

  // The valid state dict's pickle, re-wrapped with a storage of the wrong size / a truncated pickle.
  // Pickles written opcode by opcode: protocol 2 header "\x80\x02", STOP ".".
  const std::string proto = "\x80\x02";
  auto tz = [&](const char* name, const Bytes& pkl, const Bytes& data0 = Bytes(8, 0)) {
    write("torch_zip", name, torch_zip_with_pickle(pkl, data0));
  };
  tz("pickle-forbidden-global", pickle_bytes(proto + "cos\nsystem\nX\x02\x00\x00\x00ls\x85R."));
  tz("pickle-deep-lists", pickle_bytes(proto + std::string(200, ']') + std::string(199, 'a') + "."));
  tz("pickle-deep-marks", pickle_bytes(proto + std::string(5000, '(') + "."));
  tz("pickle-stack-underflow", pickle_bytes(proto + "s."));
  tz("pickle-memo-never-written", pickle_bytes(proto + "h\x07."));
  tz("pickle-huge-unicode", pickle_bytes(proto + "X\xff\xff\xff\x7f" + "abc."));
  tz("pickle-unknown-opcode", pickle_bytes(proto + "\xff."));
  tz("pickle-no-stop", pickle_bytes(proto + "}"));
  tz("pickle-self-containing", pickle_bytes(proto + "]q\x00h\x00a."));
  // A rebuilt tensor whose view runs past its storage: _rebuild_tensor_v2(persid(storage, Float, '0', cpu, 2),
  // offset 1, size (4,), stride (1,), False, OrderedDict()).
  {
    PickleWriter w;
    w.global("collections", "OrderedDict");
    w.empty_tuple();
    w.reduce();
    w.mark();
    w.text("w");
    w.global("torch._utils", "_rebuild_tensor_v2");
    w.mark();
    w.text("storage");
    w.global("torch", "FloatStorage");
    w.text("0");
    w.text("cpu");
    w.integer(2);
    w.tuple_from_mark();
    w.persistent_id();
    w.integer(1);
    w.integer(4);
    w.tuple_of(1);
    w.integer(1);
    w.tuple_of(1);
    w.boolean(false);
    w.global("collections", "OrderedDict");
    w.empty_tuple();
    w.reduce();
    w.tuple_of(3);  // (False, OrderedDict()) + ... kept simple: the reader must reject the odd arity cleanly
    w.tuple_from_mark();
    w.reduce();
    w.set_items();
    tz("pickle-view-past-storage", w.finish());
  }
  // The valid archive with its storage entry one element short, and with a bool storage holding a 7.
  write("torch_zip", "storage-size-mismatch.pt",
        make_zip({{"archive/data.pkl", data_pkl_of(pt)}, {"archive/data/0", Bytes(4, 0)}}));
  // A deflate bomb within reason: 64 MiB of zeros that compress to about 64 KiB, as a storage entry.
  write("torch_zip", "deflate-bomb.pt",
        make_zip({{"archive/data.pkl", pickle_bytes(proto + "}.")}, {"archive/data/0", Bytes(64u << 20, 0)}}, true));
  write("torch_zip", "mdlus-args-not-json.mdlus",
        make_zip({{"model.pt", pt}, {"args.json", pickle_bytes("{\"__name__\": ")}}));
  write("torch_zip", "mdlus-nested-garbage.mdlus",
        make_zip({{"model.pt", pickle_bytes("PK\x03\x04garbage")}, {"args.json", pickle_bytes("{}")}}));
  Bytes truncated(pt.begin(), pt.begin() + static_cast<std::ptrdiff_t>(pt.size() / 2));
  write("torch_zip", "truncated.pt", truncated);
  write("torch_zip", "legacy-magic.pt", pickle_bytes("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19."));
  // A tar header claiming a huge entry.
  Bytes tar(1024, 0);
  std::memcpy(tar.data(), "model.pt", 8);
  std::memcpy(tar.data() + 124, "77777777777", 11);
  std::memcpy(tar.data() + 257, "ustar", 5);
  write("torch_zip", "tar-huge-entry.mdlus", tar);
}

void checkpoint_index_seeds() {
  namespace ci = checkpoint_index;
  ci::Index index;
  index.mesh_axes = {"ddp", "domain"};
  index.mesh_shape = {2, 1};
  index.state = {{"step", 3}, {"algorithm", "adamw"}};
  index.files = {{ci::rank_file_name(0), 1234}, {ci::rank_file_name(1), 1234}};
  ci::TensorEntry w;
  w.dtype = DType::f32;
  w.shape = {3, 5};
  w.numel = 15;
  w.pieces = {{0, ci::piece_key("param.w", 0), 0, 8, 11}, {1, ci::piece_key("param.w", 8), 8, 7, 22}};
  index.tensors["param.w"] = w;
  const nlohmann::json valid = ci::to_json(index);
  write_text("checkpoint_index", "valid.json", valid.dump(1));
  auto variant = [&](const char* name, auto&& edit) {
    nlohmann::json j = valid;
    edit(j);
    write_text("checkpoint_index", name, j.dump());
  };
  const nlohmann::json::json_pointer p0("/tensors/param.w/pieces/0");
  variant("overlapping-pieces", [&](nlohmann::json& j) { j[p0]["count"] = 9; });
  variant("negative-begin", [&](nlohmann::json& j) { j[p0]["begin"] = -1; });
  variant("piece-past-tensor", [&](nlohmann::json& j) { j["tensors"]["param.w"]["pieces"][1]["count"] = 70; });
  variant("file-out-of-range", [&](nlohmann::json& j) { j[p0]["file"] = 7; });
  variant("wrong-dtype", [&](nlohmann::json& j) { j["tensors"]["param.w"]["dtype"] = "q8"; });
  variant("shape-overflow", [&](nlohmann::json& j) { j["tensors"]["param.w"]["shape"] = {1ll << 40, 1ll << 40}; });
  variant("mesh-mismatch", [&](nlohmann::json& j) { j["mesh"]["shape"] = {3, 5, 7}; });
  variant("wrong-version", [&](nlohmann::json& j) { j["version"] = 99; });
  variant("files-not-array", [&](nlohmann::json& j) { j["files"] = "rank-0"; });
  variant("crc-too-big", [&](nlohmann::json& j) { j[p0]["crc32"] = 1ll << 40; });
  variant("huge-count", [&](nlohmann::json& j) { j[p0]["count"] = 9223372036854775807ll; });
  const std::string text = valid.dump();
  write_text("checkpoint_index", "duplicate-keys.json",
             text.substr(0, text.size() - 1) + ",\"format\":\"shardrt-checkpoint\"}");
  write_text("checkpoint_index", "deep-nesting.json", std::string(3000, '[') + std::string(3000, ']'));
  write_text("checkpoint_index", "truncated.json", text.substr(0, text.size() / 2));
}

void model_config_seeds() {
  // First byte: the getter selector of fuzz_model_config; the rest: the JSON.
  auto mc = [&](const char* name, char selector, const std::string& json) {
    write_text("model_config", name, std::string(1, selector) + json);
  };
  mc("mdlus-args", 0, R"({"__name__":"FLARE","__module__":"physicsnemo.models.flare.flare","__args__":{"n_layers":2,"n_hidden":16,"functional_dim":3,"out_dim":1,"act":"gelu","mlp_ratio":4.0,"dropout":0.0,"use_te":false}})");
  mc("vit-args", 3, R"({"img_size":[32,32],"patch_size":8,"in_channels":3,"num_classes":10,"embed_dim":64,"num_heads":4,"depth":2,"mlp_ratio":4.0,"qkv_bias":true})");
  mc("ill-typed", 1, R"({"n_layers":"four","n_hidden":8.5,"act":7,"img_size":[1,"x"],"qkv_bias":"yes"})");
  mc("null-and-lists", 7, R"({"geometry_dim":null,"global_dim":null,"out_dim":[1,2,3],"functional_dim":5})");
  mc("not-object", 2, R"([1,2,3])");
  mc("args-not-object", 2, R"({"__args__":"oops"})");
  mc("huge-numbers", 6, R"({"n_layers":18446744073709551615,"n_hidden":-9223372036854775808,"x":1e400})");
  mc("deep", 4, std::string(5000, '[') + std::string(5000, ']'));
}


// shardrt-train configs: the bundled ones (tools/configs/*.json) and hostile documents and --set lines aimed at each
// check of tools::load_train_config (fuzz_training_config reads "\n--set " lines after the file as overrides).
void training_config_seeds() {
  const fs::path configs = root / ".." / ".." / ".." / "tools" / "configs";
  for (const auto& e : fs::directory_iterator(configs))
    if (e.path().extension() == ".json") {
      const Bytes b = read_file(e.path());
      write("training_config", "bundled-" + e.path().filename().string(), b);
    }
  auto tc = [&](const std::string& name, const std::string& text) { write_text("training_config", name, text); };
  const std::string train = R"("data": {"train": "run/darcy_train.json"})";
  tc("valid-minimal", "{" + train + R"(, "steps": 10})");
  tc("valid-overrides-only", "--set data.train=run/t.json\n--set steps=5\n--set optimizer.mode=ddp\n--set mesh.ddp=2\n--set data.batch_size=4");
  tc("valid-file-and-overrides", "{" + train + R"(, "epochs": 2})" +
     "\n--set optimizer.algorithm=muon\n--set schedule.kind=one_cycle\n--set model.args.n_hidden=8\n--set model.args.a.b=[1,2]");
  tc("valid-schedules", "{" + train + R"(, "steps": 40, "schedule": {"kind": "warmup_cosine", "warmup_steps": 4}})" +
     "\n--set schedule.kind=step\n--set schedule.step_size=3");
  tc("ill-typed", R"({"steps": "many", "optimizer": {"lr": "fast", "nesterov": 1}, "mesh": [1, 2]})");
  tc("missing-train", R"({"steps": 10})");
  tc("extra-key", "{" + train + R"(, "steps": 1, "optimizer": {"learning_rate": 0.1}, "bogus": {}})");
  tc("bucket-bytes-0", "{" + train + R"(, "steps": 1, "optimizer": {"bucket_bytes": 0}})");
  tc("huge-float-steps", "{" + train + R"(, "steps": 1e300, "epochs": 1e18})");
  tc("huge-integers", "{" + train + R"(, "steps": 18446744073709551615, "mesh": {"ddp": 4294967297, "domain": 1}, "model": {"seed": -1}})");
  tc("fraction-where-integer", "{" + train + R"(, "steps": 10.5, "data": {"batch_size": 2.5}})");
  tc("negative-steps", "{" + train + R"(, "steps": -5, "epochs": 3, "log": {"every": -1}, "validation": {"samples": -2}})");
  tc("number-too-big", "{" + train + R"(, "steps": 1, "optimizer": {"lr": 1e400}})");
  tc("nan-inf-strings", "{" + train + R"(, "steps": 1, "optimizer": {"lr": "NaN", "eps": "Infinity"}})");
  tc("nan-literal", "{" + train + R"(, "steps": 1, "optimizer": {"lr": NaN}})");
  tc("unknown-sharding", "{" + train + R"(, "steps": 1, "optimizer": {"mode": "fsdp"}})" + "\n--set optimizer.mode=zero4");
  tc("unknown-algorithm", "{" + train + R"(, "steps": 1, "optimizer": {"algorithm": "adam"}})");
  tc("betas-not-numbers", "{" + train + R"(, "steps": 1, "optimizer": {"betas": ["a", "b"]}})");
  tc("betas-one", "{" + train + R"(, "steps": 1, "optimizer": {"betas": [0.9]}})");
  tc("schedule-bad", "{" + train + R"(, "steps": 2, "schedule": {"kind": "one_cycle", "pct_start": 0.9999, "div_factor": 0}})" +
     "\n--set schedule.step_size=0\n--set schedule.kind=step");
  tc("schedule-unknown", "{" + train + R"(, "steps": 2, "schedule": {"kind": "cosine_restarts"}})");
  tc("batch-not-multiple", "{" + train + R"(, "steps": 2, "data": {"batch_size": 3}, "mesh": {"ddp": 2}})");
  tc("loss-and-precision", "{" + train + R"(, "steps": 2, "loss": {"kind": "huber", "huber_delta": -1}, "precision": "bf16"})");
  tc("progress-bar", "{" + train + R"(, "steps": 2, "log": {"progress_bar": "sometimes"}})");
  tc("model-args-not-object", R"({"model": {"args": [1, 2]}})");
  tc("deep-nesting", std::string(3000, '[') + std::string(3000, ']'));
  tc("deep-model-args", R"({"model": {"args": {"a": )" + std::string(2000, '[') + std::string(2000, ']') + "}}}");
  tc("not-json", R"({"steps": 1,)");
  tc("overrides-bad", "--set noequals\n--set =3\n--set optimizer=5\n--set optimizer.lr.x=1");
  tc("override-pointer-escape", "--set data.train=a\n--set steps=1\n--set model.args.a~b=1");
  tc("override-not-utf8", "--set data.train=run/\xff\xfe.json\n--set steps=1\n--set model.args.\xc3=1");
  tc("override-list-index", "--set data.train=a\n--set steps=1\n--set model.args.a=[[1, 2]]\n"
                            "--set model.args.a.0.2=3\n--set model.args.a.0.99999999999=1");  // found by the fuzzer
  tc("override-through-number", "--set data.train=a\n--set steps=1\n--set model.args.n=5\n--set model.args.n.m=1");
}

// C API programs for fuzz_capi: each byte a choice of the interpreter in tests/fuzz/fuzz_capi.cpp (its op codes
// are the step() switch's cases). A valid FLARE round trip, and programs of bad wraps, bad sharded tensors and
// handles used after destroy.
void capi_seeds() {
  auto cs = [&](const char* name, const Bytes& program) { write("capi", name, program); };
  const Bytes seed8(8, 0);
  // 10 good pieces (fx, embedding, out); 9 model_create(flare, good config, no weights, f64, mesh, config, seed)
  Bytes flare = {10, 9, 0, 0, 0, 1, 0, 0, 1};
  flare.insert(flare.end(), seed8.begin(), seed8.end());
  Bytes train = flare;
  const Bytes rest = {
      11, 0, 0, 0,         // set_input(model, "fx", fx)
      11, 0, 1, 1,         // set_input(model, "embedding", embedding)
      13, 0, 2, 1, 1,      // forward(model, out, record_grad 1)
      14, 0, 2, 1, 0,      // backward(model, out as grad_output)
      15, 0, 0, 0,         // input_grad(model, "fx", fx)
      19, 1, 0, 1,         // optimizer_create(model, "{}")
      20, 2, 0, 2, 1,      // train_step(opt, out as target, &loss)
      20, 0, 0,            // optimizer_step
      20, 1, 0, 1,         // optimizer_steps(&n)
      18, 0,               // model_destroy(model)
      18, 1, 0,            // model_destroy(the destroyed model): destroy twice
      17, 1, 0, 1,         // num_parameters of the destroyed model: use after destroy
      20, 2, 0, 2, 1,      // train_step on an optimizer whose model handle is gone (it keeps the model alive)
  };
  train.insert(train.end(), rest.begin(), rest.end());
  cs("flare-train-round-trip", train);
  Bytes infer = flare;
  const Bytes infer_rest = {11, 0, 0, 0, 11, 0, 1, 1, 13, 0, 2, 1, 0, 14, 0, 2, 1, 0, 15, 0, 2, 0, 13, 0, 0, 0, 5};
  infer.insert(infer.end(), infer_rest.begin(), infer_rest.end());
  cs("flare-mismatched-tensors", infer);  // inference then backward, input_grad of "time", fx as the output
  // wrap(dtype 99), wrap(ndim -1), wrap(negative extent), wrap(stride overlap), wrap(NULL data), wrap(out NULL)
  cs("bad-wraps", {0, 0, 99, 1, 2, 1, 3, 1, 2, 1, 1, 1, 0, 1, 1, 0, 1, 5, 1, 0, 1,
                   0, 1, 0, 255, 1, 1, 0, 1, 1, 0, 1, 7, 1, 0, 1,
                   0, 1, 1, 2, 0, 254, 1, 2, 1, 1, 1, 1, 0, 1, 1, 0, 1, 5, 1, 0, 1,
                   0, 1, 1, 2, 1, 2, 1, 3, 0, 1, 1, 1, 0, 1, 1, 0, 1, 5, 1, 0, 1,
                   0, 1, 1, 2, 1, 2, 1, 3, 1, 1, 1, 1, 0, 1, 1, 0, 0, 5, 1, 0, 1,
                   0, 1, 1, 2, 1, 2, 1, 3, 1, 1, 1, 1, 0, 1, 1, 0, 1, 5, 0, 0, 1});
  // good pieces, then sharded creates over them with wrong ndim, shapes and offsets, and points of 2 dims
  cs("bad-sharded", {10, 3, 1, 0, 1, 3, 0, 1, 1, 1, 1, 1, 0, 1, 1,
                     3, 1, 1, 1, 3, 0, 200, 0, 1, 1, 0, 1, 0, 1, 1,
                     4, 0, 0, 1, 2, 1, 0, 1, 0, 0, 1, 1, 7, 0, 5});
  // handles: null, forged, never issued, of another kind, destroyed; status calls; contexts destroyed twice
  cs("bad-handles", {7, 0, 7, 2, 1, 2, 3, 4, 5, 6, 7, 8, 7, 3, 3, 1, 8, 5, 0, 12, 3, 16, 4, 0,
                     6, 200, 1, 2, 3, 5, 6, 99, 0, 0, 0, 8, 23, 0, 1, 1, 23, 1, 7, 0, 0, 0, 1, 1,
                     22, 0, 1, 1, 1, 1, 0, 0, 22, 1, 0, 5, 9, 0});
  // model configs that are not JSON, of another kind, with absurd sizes; optimizer documents likewise
  Bytes configs = {9, 0, 2, 26, 0};
  const std::string bad_json = R"({"functional_dim": 3, "out_dim": 2, "n_layers": -1})";
  configs[3] = static_cast<unsigned char>(bad_json.size());
  configs.insert(configs.end(), bad_json.begin(), bad_json.end());
  const Bytes tail = {0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 9, 1, 0, 0, 0, 1, 0, 0, 1, 9, 9, 9, 9, 9, 9, 9, 9};
  configs.insert(configs.end(), tail.begin(), tail.end());
  const std::string absurd = R"({"functional_dim": 3, "out_dim": 2, "embedding_dim": 2, "n_hidden": 1099511627776, "n_head": 2})";
  const Bytes head2 = {9, 0, 2, static_cast<unsigned char>(absurd.size()), 0};
  configs.insert(configs.end(), head2.begin(), head2.end());
  configs.insert(configs.end(), absurd.begin(), absurd.end());
  configs.insert(configs.end(), tail.begin(), tail.end());
  const std::string opt = R"({"optimizer": {"algorithm": "adam", "betas": [1]}, "steps": 1e300})";
  const Bytes head3 = {9, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 19, 0, static_cast<unsigned char>(opt.size()), 0};
  configs.insert(configs.end(), head3.begin(), head3.end());
  configs.insert(configs.end(), opt.begin(), opt.end());
  configs.push_back(0);
  configs.push_back(1);
  cs("bad-configs", configs);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: make_corpus <tests/fuzz/corpus> [TARGET...]   (no TARGET: every target's seeds)\n");
    return 2;
  }
  root = argv[1];
  fs::create_directories(root);
  const std::vector<std::string> only(argv + 2, argv + argc);
  auto wanted = [&](const char* t) { return only.empty() || std::find(only.begin(), only.end(), t) != only.end(); };
  if (wanted("safetensors")) safetensors_seeds();
  if (wanted("torch_zip")) torch_zip_seeds();
  if (wanted("checkpoint_index")) checkpoint_index_seeds();
  if (wanted("model_config")) model_config_seeds();
  if (wanted("training_config")) training_config_seeds();
  if (wanted("capi")) capi_seeds();
  std::printf("corpus written to %s\n", root.c_str());
  return 0;
}
