// Writes the seed corpora of the libFuzzer targets (tools/fuzz corpus): small valid files made by ShardRT's own
// writers, and hostile variants that aim at each check the readers make (lengths past the file, negative and
// overlapping offsets, wrong dtypes, duplicated keys, deep nesting, forbidden pickle globals, a deflate bomb).
// The files are committed under tests/fuzz/corpus/<target>/; rerun this after changing a writer.
#include <zip.h>

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

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_corpus <tests/fuzz/corpus>\n");
    return 2;
  }
  root = argv[1];
  fs::create_directories(root);
  safetensors_seeds();
  torch_zip_seeds();
  checkpoint_index_seeds();
  model_config_seeds();
  std::printf("corpus written to %s\n", root.c_str());
  return 0;
}
