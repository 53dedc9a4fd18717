// The bad-input matrix, C++ API part (docs/reliability.md, "Bad input"). One table: each row is a call a user could
// make with input it must refuse, the typed error it must raise and words its message must hold. Every row runs on
// every rank of the job's mesh (1, 3 or 4 ranks), and on every rank the check is the same: the exact Error kind (a
// std::exception that is not a shardrt::Error, a crash or a hang fails), each expected fragment in the message, the
// rank in the message's prefix when the job has more than one, and the message (past "Kind [rank r]: ") the same on
// every rank — gathered and compared. A second, smaller table holds the non-finite inputs no op promises to check:
// the NaN must come out of the call on every rank, without an error and without a hang.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <typeinfo>
#include <vector>

#include "data/darcy_exact.h"
#include "data/normalizer.h"
#include "models/model.h"
#include "optim/checkpoint.h"
#include "optim/optimizer.h"
#include "optim/optimizer_json.h"
#include "patches/ops.h"
#include "patches/shard_tensor.h"
#include "runtime/errors.h"
#include "runtime/factories.h"
#include "runtime/safetensors.h"
#include "runtime/weights.h"
#include "tests/patches/bad_input_testing.h"
#include "tests/patches/patch_testing.h"

using namespace shardrt;
using namespace shardrt::models;
using namespace shardrt::test;
namespace fs = std::filesystem;

namespace {

// ---- the rows ----------------------------------------------------------------------------------------------------

struct Row {
  std::string category;            // models, shard_tensor, mesh, devices, configs, weights, files, non_finite
  std::string name;                // what is wrong
  std::string kind;                // the Error kind expected ("ShapeError", ...)
  std::vector<std::string> says;   // fragments the message must hold: the op, the shapes / placements / key / file
  std::function<void()> call;
  int min_ranks = 1;               // a row about a sharded layout that needs at least this many ranks
};

struct Outcome {
  std::string kind, what;
};

Outcome outcome_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return {e.kind(), e.what()};
  } catch (const std::exception& e) {
    return {std::string("untyped ") + typeid(e).name(), e.what()};
  }
  return {"(no error)", ""};
}

// Runs every row on every rank; the comparison of the messages is collective, so every rank runs every row.
void check_rows(const std::vector<Row>& rows) {
  const int P = world_size(), rank = world_rank();
  for (const Row& r : rows) {
    if (P < r.min_ranks) continue;
    INFO("bad input [" << r.category << "] " << r.name);
    const Outcome got = outcome_of(r.call);
    INFO("raised " << got.kind << ": " << got.what);
    CHECK(got.kind == r.kind);
    for (const std::string& s : r.says) CHECK_THAT(got.what, Catch::Contains(s));
    if (P > 1) CHECK_THAT(got.what, Catch::Contains("[rank " + std::to_string(rank) + "]"));
    CHECK(same_string_on_every_rank(got.kind + "|" + without_rank(got.what)));
  }
}

// ---- shared inputs -----------------------------------------------------------------------------------------------

std::string golden(const std::string& file) { return std::string(SHARDRT_TEST_DATA_DIR) + "/golden/" + file; }

Json read_config(const std::string& name) {
  std::ifstream f(golden(name + ".config.json"));
  return Json::parse(f);
}

// The whole input `x` laid out on `mesh` as the model asks (its placements, its extents).
ShardTensor laid_out(const Model& m, const std::string& name, const Tensor& x, const Mesh& mesh) {
  const AxisExtents e = m.input_extents(name, x.shape(), mesh);
  return distribute(x, mesh, m.input_placements(name, x.shape(), mesh),
                    e.empty() ? std::nullopt : std::optional<AxisExtents>(e));
}

std::map<std::string, ShardTensor> laid_out(const Model& m, const std::map<std::string, Tensor>& xs, const Mesh& mesh) {
  std::map<std::string, ShardTensor> out;
  for (const auto& [k, v] : xs) out[k] = laid_out(m, k, v, mesh);
  return out;
}

// One scratch directory, the same path on every rank (messages name files, so they must agree): rank 0 makes it.
std::string shared_scratch_dir() {
  char buf[256] = {0};
  if (world_rank() == 0) {
    std::string t = (fs::temp_directory_path() / "shardrt_bad_input.XXXXXX").string();
    REQUIRE(::mkdtemp(t.data()) != nullptr);
    std::snprintf(buf, sizeof buf, "%s", t.c_str());
  }
  MPI_Bcast(buf, sizeof buf, MPI_CHAR, 0, MPI_COMM_WORLD);
  return buf;
}

std::string bytes_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}
// A safetensors file of the header text given, then `data`; its 8-byte header length is `stated_length` (0: the
// header's true length).
std::string safetensors_bytes(const std::string& header, uint64_t stated_length, const std::string& data) {
  if (stated_length == 0) stated_length = header.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((stated_length >> (8 * i)) & 0xff);
  return out + header + data;
}

}  // namespace

TEST_CASE("bad input: the C++ API matrix — typed errors naming the op, the same on every rank", "[reliability]") {
  const Mesh mesh = world_1d();
  const int P = mesh.size();

  // The models: PhysicsNeMo's golden configs (ViT 32 x 24 image, 3 channels, patch 4; FLARE on points with an
  // embedding; GeoTransolver with local features) in f64, randomly initialised (the weights do not matter here).
  auto vit = build_model("vit", read_config("vit2d"), {DType::f64, 1});
  auto flare = build_model("flare", read_config("flare_irregular"), {DType::f64, 2});
  const Json geo_config = Json::parse(R"({"functional_dim": 3, "out_dim": 2, "geometry_dim": 3, "global_dim": 4,
    "n_layers": 1, "n_hidden": 16, "n_head": 2, "mlp_ratio": 1, "slice_num": 4})");
  auto geo = build_model("geotransolver", geo_config, {DType::f64, 3});
  const int64_t N = 9;  // points: 3 per rank on 3 ranks, uneven on 4
  const std::map<std::string, Tensor> flare_good = {{"fx", rnd({1, N, 3}, 4)}, {"embedding", rnd({1, N, 5}, 5)}};
  const std::map<std::string, Tensor> geo_good = {
      {"local_embedding", rnd({1, N, 3}, 6)}, {"geometry", rnd({1, 7, 3}, 7)}, {"global_embedding", rnd({1, 2, 4}, 8)}};
  auto flare_with = [&](const std::string& k, const Tensor& v) {
    auto in = flare_good;
    in[k] = v;
    return in;
  };
  auto geo_with = [&](const std::string& k, const Tensor& v) {
    auto in = geo_good;
    in[k] = v;
    return in;
  };
  // The good inputs run (so the rows below fail for the reason they name, not another).
  REQUIRE(vit->forward({{"x", laid_out(*vit, "x", rnd({1, 3, 32, 24}, 9), mesh)}})[0].global_shape() == Shape{1, 5});
  REQUIRE(flare->forward(laid_out(*flare, flare_good, mesh))[0].global_shape() == Shape{1, N, 2});
  REQUIRE(geo->forward(laid_out(*geo, geo_good, mesh))[0].global_shape() == Shape{1, N, 2});

  std::vector<Row> rows;
  auto add = [&](std::string category, std::string name, std::string kind, std::vector<std::string> says,
                 std::function<void()> call, int min_ranks = 1) {
    rows.push_back({std::move(category), std::move(name), std::move(kind), std::move(says), std::move(call),
                    min_ranks});
  };

  // ---- models: wrong channel count, image size, rank, dtype, input names -----------------------------------------
  auto vit_x = [&](const Tensor& x) { return [&, x] { vit->forward({{"x", laid_out(*vit, "x", x, mesh)}}); }; };
  add("models", "vit: 4 channels for in_channels 3", "ShapeError", {"vit", "[1, 4, 32, 24]", "in_channels 3"},
      vit_x(rnd({1, 4, 32, 24}, 10)));
  add("models", "vit: a 32 x 28 image for img_size [32, 24]", "ShapeError", {"vit", "[1, 3, 32, 28]", "img_size"},
      vit_x(rnd({1, 3, 32, 28}, 11)));
  add("models", "vit: a 3-D input", "ShapeError", {"vit", "[3, 32, 24]"}, vit_x(rnd({3, 32, 24}, 12)));
  add("models", "vit: f32 input to an f64 model", "DTypeError", {"vit: input 'x'", "is f32", "parameters are f64"},
      vit_x(rnd({1, 3, 32, 24}, 13).to(DType::f32)));
  add("models", "vit: an input named 'img'", "ValueError", {"vit", "'img'"},
      [&] { vit->forward({{"img", laid_out(*vit, "x", rnd({1, 3, 32, 24}, 14), mesh)}}); });
  auto flare_run = [&](std::map<std::string, Tensor> in) { return [&, in] { flare->forward(laid_out(*flare, in, mesh)); }; };
  add("models", "flare: fx with 4 channels for functional_dim 3", "ShapeError", {"flare", "'fx'", "[1, 9, 4]"},
      flare_run(flare_with("fx", rnd({1, N, 4}, 15))));
  add("models", "flare: embedding with 2 channels for embedding_dim 5", "ShapeError", {"flare", "'embedding'"},
      flare_run(flare_with("embedding", rnd({1, N, 2}, 16))));
  add("models", "flare: embedding with 10 points for fx's 9", "ShapeError", {"flare", "[1, 10, 5]"},
      flare_run(flare_with("embedding", rnd({1, N + 1, 5}, 17))));
  add("models", "flare: the embedding missing", "ValueError", {"flare", "'embedding'", "missing"},
      flare_run({{"fx", flare_good.at("fx")}}));
  add("models", "flare: an unknown input 'mesh'", "ValueError", {"flare", "'mesh'"},
      flare_run(flare_with("mesh", rnd({1, N, 3}, 18))));
  add("models", "flare: f32 fx to an f64 model", "DTypeError", {"flare: input 'fx'", "is f32", "parameters are f64"},
      flare_run(flare_with("fx", rnd({1, N, 3}, 19).to(DType::f32))));
  auto geo_run = [&](std::map<std::string, Tensor> in) { return [&, in] { geo->forward(laid_out(*geo, in, mesh)); }; };
  add("models", "geotransolver: local_embedding with 4 channels", "ShapeError",
      {"geotransolver", "'local_embedding'", "[1, 9, 4]", "functional_dim=3"},
      geo_run(geo_with("local_embedding", rnd({1, N, 4}, 20))));
  add("models", "geotransolver: geometry with 2 coordinates", "ShapeError",
      {"geotransolver", "'geometry'", "geometry_dim=3"}, geo_run(geo_with("geometry", rnd({1, 7, 2}, 21))));
  add("models", "geotransolver: geometry of batch 2", "ShapeError", {"geotransolver", "'geometry'", "batch 1"},
      geo_run(geo_with("geometry", rnd({2, 7, 3}, 22))));
  add("models", "geotransolver: f32 geometry to an f64 model", "DTypeError",
      {"geotransolver: input 'geometry'", "is f32", "parameters are f64"},
      geo_run(geo_with("geometry", rnd({1, 7, 3}, 23).to(DType::f32))));

  // ---- ShardTensor placements and mesh sizes ------------------------------------------------------------------
  const Tensor fx = flare_good.at("fx");
  add("shard_tensor", "two placements on a 1-axis mesh", "ValueError",
      {"distribute", "2 placements for a mesh of 1 axes", "[1, 9, 3]"},
      [&] { distribute(fx, mesh, {S(1), R}); });
  add("shard_tensor", "Shard(3) of a 3-D tensor", "ValueError", {"distribute", "S(3)", "[1, 9, 3]"},
      [&] { distribute(fx, mesh, {S(3)}); });
  add("shard_tensor", "extents that do not add up to the dim", "ShapeError", {"extents", "9"}, [&] {
    Extents e = split_extents(N, P);
    ++e.back();
    distribute(fx, mesh, {S(1)}, AxisExtents{e});
  });
  add("shard_tensor", "flare: fx split over its channels instead of its points", "MissingShardPatch",
      {"no patch for placements", "(S(2)) global [1, 9, 3]"},
      [&] { flare->forward({{"fx", distribute(fx, mesh, {S(2)})}, {"embedding", laid_out(*flare, "embedding", flare_good.at("embedding"), mesh)}}); },
      2);
  add("shard_tensor", "fx and embedding on two different meshes", "MissingShardPatch", {"different meshes"}, [&] {
    const Mesh other = world_1d();
    flare->forward({{"fx", laid_out(*flare, "fx", fx, mesh)},
                    {"embedding", laid_out(*flare, "embedding", flare_good.at("embedding"), other)}});
  });
  add("shard_tensor", "vit: image rows that cut a patch (uneven shard the model cannot take)", "ShapeError",
      {"vit", "multiple of patch_size 4"}, [&] {
        const Tensor x = rnd({1, 3, 32, 24}, 24);
        Extents rows = vit->input_extents("x", x.shape(), mesh)[0];
        rows[0] -= 2, rows[1] += 2;
        vit->forward({{"x", distribute(x, mesh, vit->input_placements("x", x.shape(), mesh), AxisExtents{rows})}});
      },
      2);
  add("mesh", "a ddp x domain mesh one rank larger than the job", "ValueError",
      {"needs", std::to_string(P + 1), "has " + std::to_string(P)}, [&] { Mesh(MPI_COMM_WORLD, P + 1, 1); });
  add("mesh", "an axis of size 0", "ValueError", {"size 0"}, [&] { Mesh(MPI_COMM_WORLD, 0, P); });
  add("mesh", "two axis names for a 1-D shape", "ValueError", {"2"},
      [&] { Mesh(MPI_COMM_WORLD, {"ddp", "domain"}, {P}); });

  // ---- devices and dtypes by name ------------------------------------------------------------------------------
  add("devices", "device string 'gpu'", "ValueError", {"'gpu'"}, [] { Device::parse("gpu"); });
  add("devices", "device string 'cuda:x'", "ValueError", {"'cuda:x'"}, [] { Device::parse("cuda:x"); });
  add("devices", "a tensor moved to cuda:99", "DeviceError", {"cuda:99"},
      [&] { fx.to(Device::parse("cuda:99")); });
  add("devices", "dtype name 'f17'", "ValueError", {"'f17'"}, [] { dtype_from_name("f17"); });

  // ---- model configs ----------------------------------------------------------------------------------------------
  add("configs", "model 'vitt'", "ValueError", {"'vitt'", "vit"}, [] { build_model("vitt", Json::object()); });
  add("configs", "vit: an unknown key 'patch_sise'", "ValueError", {"patch_sise"}, [] {
    Json c = read_config("vit2d");
    c["patch_sise"] = 4;
    build_model("vit", c);
  });
  add("configs", "vit: patch_size as a string", "ValueError", {"patch_size"}, [] {
    Json c = read_config("vit2d");
    c["patch_size"] = "4";
    build_model("vit", c);
  });
  add("configs", "flare: n_hidden missing", "ValueError", {"flare"}, [] {
    Json c = read_config("flare_irregular");
    c.erase("n_hidden");
    c.erase("functional_dim");
    build_model("flare", c);
  });

  // ---- weights for another model, missing / extra / shape-mismatched keys ---------------------------------------
  const std::string vit_weights = golden("vit2d.weights.safetensors");
  auto vit_state = [&] { return load_weights(vit_weights).tensors; };
  add("weights", "ViT weights loaded into FLARE", "ValueError", {vit_weights, "missing", "unexpected"},
      [&] { flare->load_state_dict(vit_state(), true, vit_weights); });
  add("weights", "GeoTransolver weights loaded into the ViT", "ValueError",
      {"geotransolver_local.weights.safetensors", "missing"}, [&] {
        const std::string w = golden("geotransolver_local.weights.safetensors");
        vit->load_state_dict(load_weights(w).tensors, true, w);
      });
  add("weights", "FLARE's .mdlus loaded into the ViT", "ValueError", {"flare_irregular.mdlus", "missing"}, [&] {
    const std::string w = golden("flare_irregular.mdlus");
    vit->load_state_dict(load_weights(w).tensors, true, w);
  });
  add("weights", "a key missing ('head.bias')", "ValueError", {vit_weights, "head.bias"}, [&] {
    auto sd = vit_state();
    sd.erase("head.bias");
    vit->load_state_dict(sd, true, vit_weights);
  });
  add("weights", "an extra key ('head.scale')", "ValueError", {vit_weights, "head.scale"}, [&] {
    auto sd = vit_state();
    sd["head.scale"] = zeros({5}, {DType::f64});
    vit->load_state_dict(sd, true, vit_weights);
  });
  add("weights", "a key of another shape ('head.weight' [4, 32])", "ValueError", {"head.weight", "[4, 32]", "[5, 32]"},
      [&] {
        auto sd = vit_state();
        sd["head.weight"] = zeros({4, 32}, {DType::f64});
        vit->load_state_dict(sd, true, vit_weights);
      });
  add("weights", "a key of another shape, not strict", "ValueError", {"pos_embed"}, [&] {
    auto sd = vit_state();
    sd["pos_embed"] = zeros({1, 47, 32}, {DType::f64});
    vit->load_state_dict(sd, false, vit_weights);
  });

  // ---- truncated and corrupted files (rank 0 writes them; every rank reads the same path) -------------------------
  const std::string dir = shared_scratch_dir();
  const std::string weights_bytes = bytes_of(vit_weights);
  const std::string mdlus_bytes = bytes_of(golden("flare_irregular.mdlus"));
  const std::string pt_bytes = bytes_of(golden("vit2d.pt"));
  const std::string good_header = R"({"w":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})";
  const std::string sixteen(16, '\0');
  const std::map<std::string, std::string> files = {
      {"truncated.safetensors", weights_bytes.substr(0, weights_bytes.size() / 2)},
      {"long_header.safetensors", safetensors_bytes(good_header, 1 << 20, sixteen)},
      {"not_json.safetensors", safetensors_bytes("{\"w\": [nope", 0, sixteen)},
      {"past_end.safetensors",
       safetensors_bytes(R"({"w":{"dtype":"F64","shape":[4],"data_offsets":[0,32]}})", 0, sixteen)},
      {"bad_dtype.safetensors",
       safetensors_bytes(R"({"w":{"dtype":"F12","shape":[2],"data_offsets":[0,16]}})", 0, sixteen)},
      {"shape_vs_bytes.safetensors",
       safetensors_bytes(R"({"w":{"dtype":"F64","shape":[3],"data_offsets":[0,16]}})", 0, sixteen)},
      {"empty.safetensors", ""},
      {"truncated.mdlus", mdlus_bytes.substr(0, mdlus_bytes.size() / 2)},
      {"truncated.pt", pt_bytes.substr(0, pt_bytes.size() / 2)},
      {"noise.bin", std::string(4096, '\x5a')},
  };
  if (world_rank() == 0)
    for (const auto& [name, bytes] : files) write_bytes(dir + "/" + name, bytes);
  MPI_Barrier(MPI_COMM_WORLD);
  auto st_row = [&](const std::string& file, std::string what, std::vector<std::string> says) {
    says.push_back(file);
    add("files", std::move(what), "IoError", std::move(says), [&, file] { load_safetensors(dir + "/" + file); });
  };
  st_row("truncated.safetensors", "safetensors cut in half", {});
  st_row("long_header.safetensors", "safetensors header length past the end of the file", {"header"});
  st_row("not_json.safetensors", "safetensors header that is not JSON", {"JSON"});
  st_row("past_end.safetensors", "safetensors data_offsets past the end of the data", {"'w'"});
  st_row("bad_dtype.safetensors", "safetensors dtype 'F12'", {"F12"});
  st_row("shape_vs_bytes.safetensors", "safetensors shape [3] over 16 bytes of F64", {"'w'"});
  st_row("empty.safetensors", "an empty safetensors file", {});
  st_row("missing.safetensors", "a safetensors file that does not exist", {});
  auto weights_row = [&](const std::string& file, std::string what) {
    add("files", std::move(what), "IoError", {file}, [&, file] { load_weights(dir + "/" + file); });
  };
  weights_row("truncated.mdlus", "a .mdlus cut in half");
  weights_row("truncated.pt", "a torch .pt cut in half");
  weights_row("noise.bin", "weights that are no known format");
  weights_row("truncated.safetensors", "safetensors weights cut in half (load_weights)");

  // ---- checkpoints: a good one saved by this mesh, then copies with one thing broken each ------------------------
  {
    const Extents e = split_extents(12, P);
    int64_t begin = 0;
    for (int r = 0; r < mesh.rank(); ++r) begin += e[static_cast<size_t>(r)];
    CheckpointContents c;
    c.ranges.push_back({"param.w", {12}, begin, rnd({e[static_cast<size_t>(mesh.rank())]}, 30)});
    c.state = {{"step", 3}};
    save_checkpoint(mesh, dir + "/ckpt", c);
  }
  const std::vector<std::string> broken = {"no_index", "index_not_json", "index_version", "rank_file_cut",
                                           "rank_file_flipped", "rank_file_missing"};
  if (world_rank() == 0) {
    for (const std::string& b : broken) fs::copy(dir + "/ckpt", dir + "/" + b, fs::copy_options::recursive);
    fs::remove(dir + "/no_index/index.json");
    write_bytes(dir + "/index_not_json/index.json", "{\"format\": \"shardrt-checkpoint\", ");
    Json index = Json::parse(bytes_of(dir + "/index_version/index.json"));
    index["version"] = 2;
    write_bytes(dir + "/index_version/index.json", index.dump());
    const std::string rank0 = bytes_of(dir + "/ckpt/rank-00000.safetensors");
    write_bytes(dir + "/rank_file_cut/rank-00000.safetensors", rank0.substr(0, rank0.size() - 5));
    std::string flipped = rank0;
    flipped.back() = static_cast<char>(flipped.back() ^ 0x40);
    write_bytes(dir + "/rank_file_flipped/rank-00000.safetensors", flipped);
    fs::remove(dir + "/rank_file_missing/rank-00000.safetensors");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  auto load = [&](const std::string& sub, RangeRequest req) {
    return [&, sub, req] { load_checkpoint(mesh, dir + "/" + sub, {req}); };
  };
  const RangeRequest whole{"param.w", 0, 12, DType::f64, std::vector<int64_t>{12}};
  add("files", "checkpoint without index.json", "IoError", {"no_index", "index.json"}, load("no_index", whole));
  add("files", "checkpoint index.json cut short (not JSON)", "IoError", {"index_not_json", "index.json"},
      load("index_not_json", whole));
  add("files", "checkpoint of format version 2", "IoError", {"index_version", "version"}, load("index_version", whole));
  add("files", "checkpoint rank file 5 bytes short", "IoError", {"rank-00000.safetensors"},
      load("rank_file_cut", whole));
  add("files", "checkpoint rank file with one bit flipped (crc32)", "IoError", {"rank-00000.safetensors", "crc"},
      load("rank_file_flipped", whole));
  add("files", "checkpoint rank file missing", "IoError", {"rank-00000.safetensors"}, load("rank_file_missing", whole));
  add("weights", "checkpoint of another model: 'param.w' asked as [13]", "IoError", {"param.w", "[12]"},
      load("ckpt", RangeRequest{"param.w", 0, 12, DType::f64, std::vector<int64_t>{13}}));
  add("weights", "checkpoint of another model: 'param.w' asked as f32", "IoError", {"param.w", "f32"},
      load("ckpt", RangeRequest{"param.w", 0, 12, DType::f32, std::vector<int64_t>{12}}));
  add("weights", "checkpoint without the tensor asked for", "IoError", {"param.v"},
      load("ckpt", RangeRequest{"param.v", 0, 12}));
  add("files", "a checkpoint directory that does not exist", "IoError", {"nowhere"}, load("nowhere", whole));

  // ---- optimizer configs with missing / extra / ill-typed keys (optim/optimizer_json.h) ---------------------------
  const Json opt_defaults = optim::default_optimizer_json();
  auto opt_row = [&](std::string what, std::vector<std::string> says, std::function<void(Json&)> edit) {
    add("configs", "optimizer: " + what, "ValueError", std::move(says), [&, edit] {
      Json o = opt_defaults.at("optimizer");
      edit(o);
      optim::optimizer_config_from_json(o, "bad_input");
    });
  };
  opt_row("lr missing", {"bad_input", "'optimizer.lr'", "missing"}, [](Json& o) { o.erase("lr"); });
  opt_row("an extra key 'lrr'", {"bad_input", "'optimizer.lrr'", "lr, "}, [](Json& o) { o["lrr"] = 1; });
  opt_row("lr as a string", {"'optimizer.lr'", "\"fast\"", "number"}, [](Json& o) { o["lr"] = "fast"; });
  opt_row("nesterov as a number", {"'optimizer.nesterov'", "boolean"}, [](Json& o) { o["nesterov"] = 1; });
  opt_row("algorithm 'adam'", {"adam"}, [](Json& o) { o["algorithm"] = "adam"; });
  opt_row("betas of length 1", {"optimizer.betas", "[0.9]"}, [](Json& o) { o["betas"] = {0.9}; });
  opt_row("betas of strings", {"optimizer.betas"}, [](Json& o) { o["betas"] = {"a", "b"}; });
  opt_row("mode 'zero9'", {"zero9"}, [](Json& o) { o["mode"] = "zero9"; });
  opt_row("not an object", {"'optimizer'", "object"}, [](Json& o) { o = Json::array({1, 2}); });
  auto schedule_row = [&](std::string what, std::vector<std::string> says, std::function<void(Json&)> edit) {
    add("configs", "schedule: " + what, "ValueError", std::move(says), [&, edit] {
      Json s = opt_defaults.at("schedule");
      edit(s);
      optim::schedule_from_json(s, 10, "bad_input");
    });
  };
  schedule_row("kind 'cosine'", {"bad_input", "'cosine'"}, [](Json& s) { s["kind"] = "cosine"; });
  schedule_row("step_size missing", {"'schedule.step_size'", "missing"}, [](Json& s) {
    s["kind"] = "step";
    s.erase("step_size");
  });
  schedule_row("gamma as a string", {"'schedule.gamma'", "number"}, [](Json& s) { s["gamma"] = "0.1"; });
  schedule_row("an extra key 'warmup'", {"'schedule.warmup'"}, [](Json& s) { s["warmup"] = 3; });

  // ---- non-finite values where a call promises to check them ----------------------------------------------------
  const double nan = std::nan(""), inf = HUGE_VAL;
  add("non_finite", "randn with std NaN", "ValueError", {"randn", "nan"},
      [&] { randn({4}, {DType::f64}, nullptr, 0.0, nan); });
  add("non_finite", "rand with bounds [0, inf]", "ValueError", {"rand", "inf"},
      [&] { rand({4}, {DType::f64}, nullptr, 0.0, inf); });
  add("non_finite", "arange to inf", "ValueError", {"arange", "inf"}, [&] { arange(0, inf); });
  add("non_finite", "Darcy solve with a NaN permeability", "ValueError", {"positive and finite", "nan"}, [&] {
    std::vector<double> k(16, 1.0), f(16, 1.0);
    k[5] = nan;
    data::solve_darcy_exact(4, k, f, 1e-10, 100);
  });
  add("non_finite", "normaliser with std inf", "IoError", {"Normalizer", "'darcy'", "inf"}, [&] {
    data::Normalizer::from_json({{"permeability", {{"mean", 0.0}, {"std", 1.0}}}, {"darcy", {{"mean", 0.0}, {"std", inf}}}});
  });

  // ---- non-finite values no call promises to check: the NaN comes out, on every rank, without an error -----------
  // (docs/reliability.md: the hot paths do not scan for NaN; shardrt-train checks the loss of every step instead.)
  struct Propagates {
    std::string name;
    std::function<Tensor()> run;  // returns the whole output (every rank)
  };
  auto with_nan = [&](Tensor x, int64_t at) {
    x = x.contiguous().clone();
    x.data<double>()[at] = nan;
    return x;
  };
  const std::vector<Propagates> propagates = {
      {"vit forward with one NaN pixel",
       [&] { return full_tensor(vit->forward({{"x", laid_out(*vit, "x", with_nan(rnd({1, 3, 32, 24}, 31), 100), mesh)}})[0]); }},
      {"flare forward with a NaN in fx's last point",
       [&] {
         return full_tensor(flare->forward(laid_out(*flare, flare_with("fx", with_nan(rnd({1, N, 3}, 32), 3 * N - 1)), mesh))[0]);
       }},
      {"geotransolver forward with a NaN geometry coordinate",
       [&] { return full_tensor(geo->forward(laid_out(*geo, geo_with("geometry", with_nan(rnd({1, 7, 3}, 33), 4)), mesh))[0]); }},
      {"relative L2 loss of a prediction holding inf",
       [&] {
         const Tensor pred = with_nan(rnd({1, N, 2}, 34), 0);
         pred.data<double>()[0] = inf;
         const ShardTensor p = laid_out(*flare, "fx", pred, mesh), t = laid_out(*flare, "fx", rnd({1, N, 2}, 35), mesh);
         return full_tensor(relative_l2_loss(p, t));
       }},
  };
  for (const Propagates& c : propagates) {
    INFO("non-finite, no check promised: " << c.name);
    const Outcome o = outcome_of([&] {
      const Tensor out = c.run().to(DType::f64).contiguous();
      const double* v = out.data<double>();
      bool any = false;
      for (int64_t i = 0; i < out.numel(); ++i) any |= !std::isfinite(v[i]);
      if (!any) throw std::runtime_error("every output element is finite");
    });
    INFO("outcome " << o.kind << ": " << o.what);
    CHECK(o.kind == "(no error)");
    CHECK(same_string_on_every_rank(o.kind));
  }

  CHECK(rows.size() == 79);  // docs/reliability.md counts them per category; keep the two in step
  check_rows(rows);
  if (world_rank() == 0) {
    std::printf("bad input, C++ API: %zu error rows and %zu non-finite propagation rows on %d rank(s)\n", rows.size(),
                propagates.size(), P);
    fs::remove_all(dir);
  }
}
