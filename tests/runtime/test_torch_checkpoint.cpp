// torch .pt/.pth and PhysicsNeMo .mdlus reading: every fixture written by torch/PhysicsNeMo themselves
// (tools/golden/make_torch_fixtures.py) loads and equals its safetensors twin bit for bit; wrapper prefixes and
// training checkpoints are normalised with a note; and every hostile or broken file is an IoError naming the
// problem. A hostile pickle that names os.system would create a marker file if anything ran it.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "runtime/errors.h"
#include "runtime/factories.h"
#include "runtime/safetensors.h"
#include "runtime/tar_archive.h"
#include "runtime/torch_checkpoint.h"
#include "runtime/torch_pickle.h"
#include "runtime/weights.h"
#include "runtime/zip_archive.h"
#include "tests/runtime/require_typed_error.h"

using namespace shardrt;

namespace {

const std::string kDir = std::string(SHARDRT_TEST_DATA_DIR) + "/torch/";
// The file the hostile fixtures' commands would create (PWNED_MARKER in the fixture script).
const char* kPwnedMarker = "/tmp/shardrt_torch_pickle_was_executed";

std::string fixture(const std::string& name) { return kDir + name; }

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string read_raw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct TempFile {
  explicit TempFile(const std::string& name) : path("/tmp/shardrt_ckpt_" + std::to_string(::getpid()) + "_" + name) {
    std::remove(path.c_str());
  }
  ~TempFile() { std::remove(path.c_str()); }
  void write(const std::string& bytes) const {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(out.good());
  }
  std::string path;
};

// Same key set, and per key the same dtype, shape and bytes; loaded tensors must be contiguous CPU tensors.
void require_equal_to_twin(const std::map<std::string, Tensor>& loaded, const std::string& twin_name) {
  const SafetensorsFile twin = load_safetensors(fixture(twin_name));
  std::vector<std::string> loaded_keys;
  for (const auto& [k, t] : loaded) loaded_keys.push_back(k);
  REQUIRE(loaded_keys == twin.names());
  for (const auto& [key, t] : loaded) {
    INFO("tensor " << key);
    const Tensor& want = twin.get(key);
    REQUIRE(t.dtype() == want.dtype());
    REQUIRE(t.shape() == want.shape());
    REQUIRE(t.is_contiguous());
    REQUIRE(t.device() == Device::cpu());
    REQUIRE(t.nbytes() == want.nbytes());
    if (t.nbytes() > 0) REQUIRE(std::memcmp(t.raw_data(), want.raw_data(), t.nbytes()) == 0);
  }
}

bool has_note_containing(const LoadedWeights& w, const std::string& fragment) {
  for (const std::string& n : w.notes)
    if (n.find(fragment) != std::string::npos) return true;
  return false;
}

PickleValuePtr unpickle(const std::string& bytes) {
  return unpickle_torch("test.pkl", reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
}

}  // namespace

TEST_CASE("torch state dict with every dtype, 0-d, zero-size and views equals its safetensors twin", "[torch]") {
  const TorchStateDict sd = load_torch_state_dict(fixture("all_dtypes.pt"));
  REQUIRE(sd.dicts.empty());
  REQUIRE(sd.other_keys.empty());
  // The file's order is torch.save's (insertion) order.
  REQUIRE(sd.keys == std::vector<std::string>{"f64", "f32", "f16", "bf16", "i64", "i32", "u8", "bool", "scalar",
                                              "empty", "param", "view_offset", "view_transposed", "view_strided"});
  require_equal_to_twin(sd.tensors, "all_dtypes.expected.safetensors");

  // A few values by hand, so the comparison cannot pass by both sides being wrong the same way.
  const auto& t = sd.tensors;
  REQUIRE(t.at("scalar").dim() == 0);
  REQUIRE(t.at("scalar").item() == 3.5);
  REQUIRE(t.at("empty").shape() == Shape{3, 0});
  REQUIRE(t.at("i64").to_vector() == std::vector<double>{-1099511627776.0, -1.0, 0.0, 4611686018427387904.0});
  REQUIRE(t.at("i32").to_vector() == std::vector<double>{-7, 8, 2147483647, -2147483648.0});
  REQUIRE(t.at("u8").to_vector() == std::vector<double>{0, 1, 200, 255});
  REQUIRE(t.at("bool").to_vector() == std::vector<double>{1, 0, 1});
  // base = arange(24).reshape(4, 6): rows 1-2; its transpose; every other column.
  REQUIRE(t.at("view_offset").to_vector() == std::vector<double>{6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17});
  REQUIRE(t.at("view_transposed").shape() == Shape{6, 4});
  REQUIRE(t.at("view_transposed").to_vector()[1] == 6.0);  // [0][1] = base[1][0]
  REQUIRE(t.at("view_strided").to_vector() == std::vector<double>{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22});
  // A view that was contiguous in the file stays a view of the loaded 24-element storage, as in torch.
  REQUIRE(t.at("view_offset").offset() == 6);
  REQUIRE(t.at("view_offset").storage()->bytes() == 24 * sizeof(float));
}

TEST_CASE("load_weights reads a torch file and keeps a plain state dict as it is", "[torch]") {
  const LoadedWeights w = load_weights(fixture("all_dtypes.pt"));
  REQUIRE(w.format == "torch-zip");
  REQUIRE(w.notes.empty());
  REQUIRE_FALSE(w.args.has_value());
  REQUIRE(w.model_name.empty());
  require_equal_to_twin(w.tensors, "all_dtypes.expected.safetensors");
}

TEST_CASE("a higher pickle protocol and a checkpoint saved from a GPU load the same tensors", "[torch]") {
  for (const char* name : {"protocol4.pt", "saved_on_cuda.pt"}) {
    INFO(name);
    const LoadedWeights w = load_weights(fixture(name));
    REQUIRE(w.format == "torch-zip");
    REQUIRE(w.notes.empty());
    require_equal_to_twin(w.tensors, "linear.expected.safetensors");
  }
}

TEST_CASE("load_weights strips DDP 'module.' and torch.compile '_orig_mod.' prefixes with a note", "[torch]") {
  for (const char* name : {"ddp_prefixed.pth", "compiled_prefixed.pt"}) {
    INFO(name);
    const LoadedWeights w = load_weights(fixture(name));
    REQUIRE(w.notes.size() == 1);
    REQUIRE(has_note_containing(w, "removed the wrapper prefixes 'module.'/'_orig_mod.' from 2 of 2 keys"));
    require_equal_to_twin(w.tensors, "linear.expected.safetensors");
  }
  // The raw reader leaves names as they are in the file.
  const TorchStateDict raw = load_torch_state_dict(fixture("compiled_prefixed.pt"));
  REQUIRE(raw.tensors.count("module._orig_mod.weight") == 1);
}

TEST_CASE("load_weights picks the state dict out of a training checkpoint, or lists the top-level keys", "[torch]") {
  const TorchStateDict raw = load_torch_state_dict(fixture("training.pt"));
  REQUIRE(raw.keys == std::vector<std::string>{"epoch", "model_state_dict", "loss", "tags"});
  REQUIRE(raw.other_keys == std::vector<std::string>{"epoch", "loss", "tags"});
  REQUIRE(raw.dicts.count("model_state_dict") == 1);
  REQUIRE(raw.dicts.at("model_state_dict")->tensors.size() == 2);

  const LoadedWeights w = load_weights(fixture("training.pt"));
  REQUIRE(w.notes.size() == 1);
  REQUIRE(has_note_containing(w, "training checkpoint (top-level keys: epoch, model_state_dict, loss, tags)"));
  REQUIRE(has_note_containing(w, "loaded the state dict under 'model_state_dict'"));
  require_equal_to_twin(w.tensors, "linear.expected.safetensors");

  REQUIRE_TYPED_ERROR(load_weights(fixture("training_unknown_key.pt")), IoError,
                      "top-level keys: epoch, weights_of_some_kind");
}

TEST_CASE("a PhysicsNeMo .mdlus (zip and legacy tar) gives FLARE's state dict and args.json", "[torch][mdlus]") {
  for (const char* name : {"flare_tiny.mdlus", "flare_tiny_legacy.mdlus"}) {
    INFO(name);
    const LoadedWeights w = load_weights(fixture(name));
    REQUIRE(w.format == (std::string(name) == "flare_tiny.mdlus" ? "mdlus-zip" : "mdlus-tar"));
    REQUIRE(w.model_name == "FLARE");
    REQUIRE(w.notes.empty());
    REQUIRE(w.args.has_value());
    const nlohmann::json& args = (*w.args)["__args__"];
    REQUIRE(args["functional_dim"] == 1);
    REQUIRE(args["out_dim"] == 1);
    REQUIRE(args["embedding_dim"] == 2);
    REQUIRE(args["n_layers"] == 1);
    REQUIRE(args["n_hidden"] == 8);
    REQUIRE(args["n_head"] == 2);
    REQUIRE(args["mlp_ratio"] == 1);
    REQUIRE(args["slice_num"] == 4);
    REQUIRE(args["act"] == "gelu");
    // The tiny config: one block (attention + two MLPs + norms) and the preprocessing MLP.
    REQUIRE(w.tensors.size() == 25);
    REQUIRE(w.tensors.count("blocks.0.Attn.q_global") == 1);
    REQUIRE(w.tensors.count("preprocess.layers.0.weight") == 1);
    require_equal_to_twin(w.tensors, "flare_tiny.expected.safetensors");

    const MdlusCheckpoint m = load_mdlus(fixture(name));
    REQUIRE(m.model_module == "physicsnemo.models.flare.flare");
    REQUIRE(m.metadata["physicsnemo_version"] == "2.2.2");
  }
  const TarArchive tar = TarArchive::open_file(fixture("flare_tiny_legacy.mdlus"));
  REQUIRE(tar.contains("model.pt"));
  REQUIRE(tar.contains("args.json"));
  REQUIRE(tar.contains("metadata.json"));
}

TEST_CASE("load_weights dispatches on content, not extension, and save_weights round-trips", "[torch]") {
  TempFile torch_named_safetensors("torch_inside.safetensors");
  torch_named_safetensors.write(read_raw(fixture("plain.pt")));
  const LoadedWeights a = load_weights(torch_named_safetensors.path);
  REQUIRE(a.format == "torch-zip");
  REQUIRE(a.tensors.at("w").to_vector() == std::vector<double>{0, 1, 2, 3, 4, 5});

  TempFile saved("saved.pt");
  const LoadedWeights flare = load_weights(fixture("flare_tiny.mdlus"));
  save_weights(saved.path, flare.tensors);
  const LoadedWeights b = load_weights(saved.path);
  REQUIRE(b.format == "safetensors");
  REQUIRE(b.tensors.size() == 25);
  require_equal_to_twin(b.tensors, "flare_tiny.expected.safetensors");
}

TEST_CASE("a pickle that names os.system or eval is refused, never run", "[torch][hostile]") {
  std::remove(kPwnedMarker);
  REQUIRE_TYPED_ERROR(load_torch_state_dict(fixture("evil_os_system.pt")), IoError,
                      "global 'posix system' is not allowed in a state dict; refusing to load it");
  REQUIRE_TYPED_ERROR(load_weights(fixture("evil_eval.pt")), IoError,
                      "global '__builtin__ eval' is not allowed in a state dict; refusing to load it");
  REQUIRE_TYPED_ERROR(load_weights(fixture("evil_os_system.pt")), IoError, "evil_os_system.pt");
  REQUIRE_FALSE(file_exists(kPwnedMarker));
}

TEST_CASE("broken torch files are IoErrors naming the problem", "[torch][hostile]") {
  REQUIRE_TYPED_ERROR(load_torch_state_dict(fixture("truncated.pt")), IoError, "cannot open it as a zip archive");
  REQUIRE_TYPED_ERROR(load_weights(fixture("truncated.pt")), IoError, "truncated.pt");
  REQUIRE_TYPED_ERROR(load_torch_state_dict(fixture("short_storage.pt")), IoError,
                      "holds 12 bytes, but the pickle says 6 x FloatStorage = 24 bytes");
  REQUIRE_TYPED_ERROR(load_torch_state_dict(fixture("tensor_past_storage.pt")), IoError,
                      "tensor 'w' of size [2, 3], stride [3, 1] and storage offset 0 reaches element 5 of storage "
                      "'0', which holds only 4 elements");
  REQUIRE_TYPED_ERROR(load_torch_state_dict(fixture("big_endian.pt")), IoError, "byteorder is 'big'");
  REQUIRE_TYPED_ERROR(load_weights(fixture("unsupported_int8.pt")), IoError,
                      "tensor 'w' has dtype torch.int8, which ShardRT does not support");
  REQUIRE_TYPED_ERROR(load_weights(fixture("legacy_format.pt")), IoError,
                      "legacy (pre-1.6) torch.save format, which ShardRT does not read; re-save it");
  REQUIRE_TYPED_ERROR(load_weights(fixture("no_such_file.pt")), IoError, "cannot open");
}

TEST_CASE("truncated .mdlus files, zip and tar, are IoErrors", "[torch][mdlus][hostile]") {
  for (const char* name : {"flare_tiny.mdlus", "flare_tiny_legacy.mdlus"}) {
    INFO(name);
    const std::string whole = read_raw(fixture(name));
    TempFile cut(std::string("cut_") + name);
    cut.write(whole.substr(0, whole.size() / 2));
    if (std::string(name) == "flare_tiny.mdlus") {
      REQUIRE_TYPED_ERROR(load_weights(cut.path), IoError, "cannot open it as a zip archive");
    } else {
      // model.pt is the tar's first member and ends past the cut.
      REQUIRE_TYPED_ERROR(load_weights(cut.path), IoError, "bytes, but only");
    }
  }
}

TEST_CASE("a storage whose bytes were altered fails libzip's CRC check", "[torch][hostile]") {
  // plain.pt's storage is arange(6) as float32; 5.0f is 00 00 a0 40 and occurs once, in the storage entry.
  std::string bytes = read_raw(fixture("plain.pt"));
  const std::string five("\x00\x00\xa0\x40", 4);
  const std::size_t at = bytes.find(five);
  REQUIRE(at != std::string::npos);
  REQUIRE(bytes.find(five, at + 1) == std::string::npos);
  bytes[at + 3] = 0x41;  // 5.0f -> 20.0f
  TempFile corrupt("crc.pt");
  corrupt.write(bytes);
  REQUIRE_TYPED_ERROR(load_torch_state_dict(corrupt.path), IoError, "CRC");
}

TEST_CASE("zip archive lists entries and checks sizes before reading", "[torch][zip]") {
  const ZipArchive zip = ZipArchive::open_file(fixture("plain.pt"));
  REQUIRE(zip.contains("archive/data.pkl"));
  REQUIRE(zip.contains("archive/byteorder"));
  REQUIRE(zip.size_of("archive/data/0") == 24);
  REQUIRE(zip.read_text("archive/byteorder", 16) == "little");
  REQUIRE_TYPED_ERROR(zip.read("archive/data/0", 23), IoError, "states 24 bytes, more than the 23");
  float out[5];
  REQUIRE_TYPED_ERROR(zip.read_into("archive/data/0", out, sizeof out), IoError, "holds 24 bytes, expected 20");
  REQUIRE_TYPED_ERROR(zip.size_of("archive/data/9"), IoError, "has no entry 'archive/data/9'");
  // A torch archive is not an .mdlus: load_mdlus says what is missing.
  REQUIRE_TYPED_ERROR(load_mdlus(fixture("plain.pt")), IoError, "has no model.pt");
}

TEST_CASE("the restricted unpickler refuses what a state dict never contains", "[torch][pickle]") {
  using namespace std::string_literals;
  // PROTO 2, EMPTY_DICT, STOP: the smallest valid input.
  REQUIRE(unpickle("\x80\x02}."s)->kind == PickleValue::Kind::dict);
  // A dict {'a': [1, 2.5, None, True]} through SETITEM / APPENDS.
  PickleValuePtr v = unpickle("\x80\x02}X\x01\x00\x00\x00" "a](K\x01G\x40\x04\x00\x00\x00\x00\x00\x00N\x88" "es."s);
  REQUIRE(v->entries.size() == 1);
  REQUIRE(v->entries[0].first->text == "a");
  const auto& items = v->entries[0].second->items;
  REQUIRE(items.size() == 4);
  REQUIRE(items[0]->integer == 1);
  REQUIRE(items[1]->floating == 2.5);
  REQUIRE(items[2]->kind == PickleValue::Kind::none);
  REQUIRE(items[3]->boolean);
  // LONG1 sign extension and BININT's sign: -2 as one byte, -70000 as four.
  PickleValuePtr n = unpickle("\x80\x02(\x8a\x01\xfeJ\x90\xee\xfe\xfft."s);
  REQUIRE(n->items[0]->integer == -2);
  REQUIRE(n->items[1]->integer == -70000);

  REQUIRE_TYPED_ERROR(unpickle("\x80\x02\x8c\x02os\x8c\x06system\x93."s), IoError,
                      "global 'os system' is not allowed in a state dict");
  REQUIRE_TYPED_ERROR(unpickle("cbuiltins\nexec\n."s), IoError, "global 'builtins exec' is not allowed");
  REQUIRE_TYPED_ERROR(unpickle("\x80\x02(i__main__\nX\n."s), IoError, "opcode INST is not used by a state dict");
  REQUIRE_TYPED_ERROR(unpickle("\x80\x02\xff."s), IoError, "byte 0xff is not a pickle opcode");
  REQUIRE_TYPED_ERROR(unpickle("\x80\x02}"s), IoError, "needs 1 bytes, but the pickle ends");
  REQUIRE_TYPED_ERROR(unpickle("\x80\x02h\x07."s), IoError, "reads memo slot 7, which was never written");
  REQUIRE_TYPED_ERROR(unpickle("\x80\x02s."s), IoError, "SETITEM needs 2 values");
  REQUIRE_TYPED_ERROR(unpickle("\x80\x02}}."s), IoError, "STOP with 2 values on the stack");
  // Calling a storage type, or an allowed callable with made-up arguments.
  REQUIRE_TYPED_ERROR(unpickle("\x80\x02\x63torch\nFloatStorage\n)R."s), IoError,
                      "REDUCE calls 'torch FloatStorage', which a state dict never calls");
  REQUIRE_TYPED_ERROR(unpickle("\x80\x02\x63torch._utils\n_rebuild_tensor_v2\n)R."s), IoError,
                      "_rebuild_tensor_v2 takes 6 or 7 arguments, got 0");
  // A list appended to after it was nested: the only way to build a cycle or deep structure cheaply.
  REQUIRE_TYPED_ERROR(unpickle("\x80\x02]q\x00]q\x01" "ah\x01K\x01" "a."s), IoError,
                      "APPEND changes a list after it was put inside another value");
  // Nesting deeper than kMaxPickleDepth.
  std::string deep = "\x80\x02"s;
  for (int i = 0; i < kMaxPickleDepth + 2; ++i) deep += ']';
  for (int i = 0; i < kMaxPickleDepth + 1; ++i) deep += 'a';
  REQUIRE_TYPED_ERROR(unpickle(deep), IoError, "containers nest deeper than 64 levels");
}
