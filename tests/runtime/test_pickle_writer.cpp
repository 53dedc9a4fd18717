// The restricted pickle writer and the exports built on it: opcodes byte for byte, integers of every width read
// back by our own unpickler, and every export (.mdlus, .pt, safetensors) read back by load_weights bit for bit, with
// the key order and args written — for tensors of every dtype and geometry and for the FLARE golden's weights.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "optim/checkpoint.h"
#include "runtime/errors.h"
#include "runtime/mdlus_writer.h"
#include "runtime/pickle_writer.h"
#include "runtime/torch_checkpoint.h"
#include "runtime/torch_pickle.h"
#include "runtime/weights.h"
#include "tests/optim/checkpoint_testing.h"
#include "tests/optim/golden_export.h"
#include "tests/support/world.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

std::string temp_path(const std::string& tag) {
  return "/tmp/shardrt_export_" + std::to_string(::getpid()) + "_" + std::to_string(world_rank()) + "_" + tag;
}

struct TempFile {
  explicit TempFile(const std::string& tag) : path(temp_path(tag)) { std::remove(path.c_str()); }
  ~TempFile() { std::remove(path.c_str()); }
  std::string path;
};

std::vector<unsigned char> bytes(std::initializer_list<int> b) { return std::vector<unsigned char>(b.begin(), b.end()); }

// A state dict of every dtype and geometry: a 0-d tensor, an empty one, a transposed (non-contiguous) view.
std::map<std::string, Tensor> all_kinds(std::vector<std::string>& order) {
  std::map<std::string, Tensor> sd;
  auto add = [&](const std::string& key, Tensor t) {
    sd.emplace(key, t);
    order.push_back(key);
  };
  // Registration order differs from sorted order on purpose, so a writer that sorted would fail.
  add("z.weight", known_values({4, 3}, DType::f32, 1, 0.1));
  add("b.bias", known_values({7}, DType::f64, 1, 0.2));
  add("m.embed", known_values({2, 3, 2}, DType::bf16, 1, 0.3));
  add("h.half", known_values({5}, DType::f16, 1, 0.4));
  add("c.count", known_values({3}, DType::i64, 1, 0.5));
  add("i.codes", known_values({2, 2}, DType::i32, 1, 0.6));
  add("u.bytes", known_values({6}, DType::u8, 1, 0.7));
  add("k.mask", known_values({4}, DType::boolean, 1, 0.8));
  add("s.scalar", known_values({}, DType::f64, 1, 0.9));
  add("e.empty", Tensor::empty({0, 3}, DType::f32));
  add("t.transposed", known_values({3, 5}, DType::f32, 1, 1.0).transpose(0, 1));
  return sd;
}

void require_same_tensors(const std::map<std::string, Tensor>& want, const std::map<std::string, Tensor>& got) {
  REQUIRE(got.size() == want.size());
  for (const auto& [key, t] : want) {
    INFO(key);
    REQUIRE(got.count(key) == 1);
    CHECK(got.at(key).shape() == t.shape());
    CHECK(same_bits(got.at(key), t));
  }
}

}  // namespace

TEST_CASE("pickle writer: opcodes and integer widths as Python's pickle writes them", "[checkpoint][export]") {
  SECTION("integers take the shortest form, and our unpickler reads every one back") {
    const std::vector<std::pair<int64_t, std::vector<unsigned char>>> cases = {
        {0, bytes({'K', 0})},
        {255, bytes({'K', 255})},
        {256, bytes({'M', 0, 1})},
        {65535, bytes({'M', 255, 255})},
        {65536, bytes({'J', 0, 0, 1, 0})},
        {-1, bytes({'J', 255, 255, 255, 255})},
        {std::numeric_limits<int32_t>::min(), bytes({'J', 0, 0, 0, 0x80})},
        {int64_t{1} << 31, bytes({0x8a, 5, 0, 0, 0, 0x80, 0})},
        {-(int64_t{1} << 31) - 1, bytes({0x8a, 5, 255, 255, 255, 0x7f, 255})},
        {int64_t{1} << 40, bytes({0x8a, 6, 0, 0, 0, 0, 0, 1})},
        {std::numeric_limits<int64_t>::max(), bytes({0x8a, 8, 255, 255, 255, 255, 255, 255, 255, 0x7f})},
        {std::numeric_limits<int64_t>::min(), bytes({0x8a, 8, 0, 0, 0, 0, 0, 0, 0, 0x80})},
    };
    for (const auto& [value, encoded] : cases) {
      INFO(value);
      PickleWriter w;
      w.integer(value);
      w.tuple_of(1);
      const auto pkl = w.finish();
      // PROTO 2, the integer, TUPLE1, STOP.
      REQUIRE(pkl.size() == encoded.size() + 4);
      CHECK(std::vector<unsigned char>(pkl.begin() + 2, pkl.end() - 2) == encoded);
      const PickleValuePtr v = unpickle_torch("integers", pkl.data(), pkl.size());
      REQUIRE(v->kind == PickleValue::Kind::tuple);
      CHECK(v->items.at(0)->integer == value);
    }
  }
  SECTION("a global is named once and then fetched from the memo") {
    PickleWriter w;
    w.global("collections", "OrderedDict");
    w.global("collections", "OrderedDict");
    w.tuple_of(2);
    const auto pkl = w.finish();
    const std::string text(pkl.begin(), pkl.end());
    CHECK(text == std::string("\x80\x02" "ccollections\nOrderedDict\nq\x00" "h\x00\x86.", 33));
  }
  SECTION("a state dict: keys in the caller's order, storages by persistent id, contiguous strides") {
    const std::vector<PickledStateEntry> entries = {{"w", DType::bf16, {2, 3, 4}, "0"}, {"a", DType::i64, {}, "1"},
                                                    {"e", DType::f32, {0, 2}, "2"}};
    const auto pkl = pickle_state_dict(entries);
    const PickleValuePtr v = unpickle_torch("state dict", pkl.data(), pkl.size());
    REQUIRE(v->kind == PickleValue::Kind::dict);
    REQUIRE(v->entries.size() == 3);
    CHECK(v->entries[0].first->text == "w");
    CHECK(v->entries[1].first->text == "a");
    const PickledTensor& w = v->entries[0].second->tensor;
    CHECK(w.storage->storage_type == "BFloat16Storage");
    CHECK(w.storage->key == "0");
    CHECK(w.storage->numel == 24);
    CHECK(w.size == std::vector<int64_t>{2, 3, 4});
    CHECK(w.stride == std::vector<int64_t>{12, 4, 1});
    CHECK(v->entries[1].second->tensor.size.empty());
    CHECK(v->entries[1].second->tensor.storage->storage_type == "LongStorage");
    CHECK(v->entries[2].second->tensor.stride == std::vector<int64_t>{2, 1});
  }
}

TEST_CASE("exports: .mdlus, .pt and safetensors read back by load_weights bit for bit, in key order",
          "[checkpoint][export]") {
  std::vector<std::string> order;
  const auto sd = all_kinds(order);
  SECTION(".mdlus") {
    TempFile f("all.mdlus");
    const nlohmann::json args = {{"__name__", "Toy"}, {"__module__", "toy.models"}, {"__args__", {{"width", 3}, {"act", "gelu"}}}};
    export_mdlus(f.path, sd, order, args);
    const LoadedWeights w = load_weights(f.path);
    CHECK(w.format == "mdlus-zip");
    require_same_tensors(sd, w.tensors);
    CHECK(w.args.value() == args);
    CHECK(w.model_name == "Toy");
    const MdlusCheckpoint m = load_mdlus(f.path);
    CHECK(m.state_dict.keys == order);
    CHECK(m.metadata["mdlus_file_version"] == kMdlusFileVersion);
  }
  SECTION(".pt") {
    TempFile f("all.pt");
    export_torch(f.path, sd, order);
    const LoadedWeights w = load_weights(f.path);
    CHECK(w.format == "torch-zip");
    require_same_tensors(sd, w.tensors);
    CHECK(load_torch_state_dict(f.path).keys == order);
  }
  SECTION("safetensors") {
    TempFile f("all.safetensors");
    export_safetensors(f.path, sd);
    require_same_tensors(sd, load_weights(f.path).tensors);
  }
  SECTION("a key order that misses or repeats a key, and args that are not PhysicsNeMo's, are ValueErrors") {
    TempFile f("bad.mdlus");
    const nlohmann::json args = {{"__name__", "Toy"}, {"__module__", "toy"}, {"__args__", nlohmann::json::object()}};
    std::vector<std::string> missing(order.begin(), order.end() - 1), repeated = order;
    repeated.push_back(order.front());
    CHECK_THROWS_WITH(export_mdlus(f.path, sd, missing, args), Catch::Contains("is missing from key_order"));
    CHECK_THROWS_WITH(export_mdlus(f.path, sd, repeated, args), Catch::Contains("twice"));
    CHECK_THROWS_WITH(export_mdlus(f.path, sd, {"nope"}, args), Catch::Contains("does not hold"));
    CHECK_THROWS_AS(export_mdlus(f.path, sd, order, {{"__name__", "Toy"}}), ValueError);
    CHECK_FALSE(std::ifstream(f.path).good());  // nothing written by a refused export
  }
}

TEST_CASE("exports: the FLARE golden's weights as a .mdlus keyed and ordered exactly as PhysicsNeMo's own",
          "[checkpoint][export]") {
  const auto sd = flare_golden_state_dict(SHARDRT_TEST_DATA_DIR, "flare_irregular");
  TempFile f("flare.mdlus");
  export_mdlus(f.path, sd.tensors, sd.key_order, sd.args);
  const LoadedWeights ours = load_weights(f.path);
  require_same_tensors(sd.tensors, ours.tensors);
  CHECK(ours.model_name == "FLARE");
  // PhysicsNeMo's own .mdlus of the same model: the same keys in the same order, the same args.
  const MdlusCheckpoint theirs = load_mdlus(std::string(SHARDRT_TEST_DATA_DIR) + "/golden/flare_irregular.mdlus");
  CHECK(load_mdlus(f.path).state_dict.keys == theirs.state_dict.keys);
  CHECK(ours.args.value()["__name__"] == theirs.args["__name__"]);
  CHECK(ours.args.value()["__module__"] == theirs.args["__module__"]);
  for (const auto& [key, value] : ours.args.value()["__args__"].items()) CHECK(theirs.args["__args__"][key] == value);
}
