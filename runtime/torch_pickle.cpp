#include "runtime/torch_pickle.h"

#include <algorithm>
#include <cstring>
#include <string_view>
#include <unordered_map>

#include "runtime/errors.h"

namespace shardrt {

namespace {

using Kind = PickleValue::Kind;

// The callables a state dict's pickle may name, and the storage types its persistent ids may name.
constexpr std::string_view kOrderedDict = "collections OrderedDict";
constexpr std::string_view kRebuildTensor = "torch._utils _rebuild_tensor_v2";
constexpr std::string_view kRebuildParameter = "torch._utils _rebuild_parameter";
constexpr std::string_view kRebuildParameterWithState = "torch._utils _rebuild_parameter_with_state";
constexpr std::string_view kStorageTypes[] = {
    "FloatStorage", "DoubleStorage", "HalfStorage", "BFloat16Storage", "LongStorage",   "IntStorage",
    "ShortStorage", "CharStorage",   "ByteStorage", "BoolStorage",     "UntypedStorage",
};

bool is_storage_type(std::string_view global) {
  if (!global.starts_with("torch ")) return false;
  global.remove_prefix(6);
  return std::find(std::begin(kStorageTypes), std::end(kStorageTypes), global) != std::end(kStorageTypes);
}

bool is_allowed_global(std::string_view global) {
  return global == kOrderedDict || global == kRebuildTensor || global == kRebuildParameter ||
         global == kRebuildParameterWithState || is_storage_type(global);
}

// Names of the opcodes this reader refuses but a person may meet (protocols 0-5), so the message says which.
const char* refused_opcode_name(unsigned char op) {
  switch (op) {
    case 'I': return "INT";
    case 'L': return "LONG";
    case 0x8b: return "LONG4";
    case 'F': return "FLOAT";
    case 'S': return "STRING";
    case 'T': return "BINSTRING";
    case 'U': return "SHORT_BINSTRING";
    case 'V': return "UNICODE";
    case 'B': return "BINBYTES";
    case 'C': return "SHORT_BINBYTES";
    case 0x8e: return "BINBYTES8";
    case 0x96: return "BYTEARRAY8";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    case 'P': return "PERSID";
    case 'p': return "PUT";
    case 'g': return "GET";
    case 'i': return "INST";
    case 'o': return "OBJ";
    case 0x81: return "NEWOBJ";
    case 0x92: return "NEWOBJ_EX";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case '2': return "DUP";
    default: return nullptr;
  }
}

class Unpickler {
 public:
  Unpickler(const std::string& label, const unsigned char* bytes, std::size_t n) : label_(label), begin_(bytes), p_(bytes), end_(bytes + n) {}

  PickleValuePtr run() {
    while (true) {
      op_at_ = position();
      const unsigned char op = u8("an opcode");
      switch (op) {
        case 0x80: {  // PROTO
          const unsigned char version = u8("PROTO");
          if (version > 5) fail("pickle protocol ", int(version), " is newer than any this reader knows (0-5)");
          break;
        }
        case 0x95: skip(8, "FRAME"); break;  // FRAME: a length hint for buffered readers; the data is already here
        case '.': return stop();
        case '(': marks_.push_back(stack_.size()); break;  // MARK
        case '0':                                            // POP
          if (!marks_.empty() && marks_.back() == stack_.size()) marks_.pop_back();
          else pop("POP");
          break;
        case '1': pop_mark("POP_MARK"); break;
        case '}': push(make(Kind::dict)); break;   // EMPTY_DICT
        case ']': push(make(Kind::list)); break;   // EMPTY_LIST
        case ')': push(make(Kind::tuple)); break;  // EMPTY_TUPLE
        case 't': push(make_tuple(pop_mark("TUPLE"))); break;
        case 0x85: push(make_tuple(pop_n(1, "TUPLE1"))); break;
        case 0x86: push(make_tuple(pop_n(2, "TUPLE2"))); break;
        case 0x87: push(make_tuple(pop_n(3, "TUPLE3"))); break;
        case 'd': {  // DICT
          PickleValuePtr dict = make(Kind::dict);
          set_items(dict, pop_mark("DICT"), "DICT");
          push(dict);
          break;
        }
        case 'l': {  // LIST
          PickleValuePtr list = make(Kind::list);
          for (PickleValuePtr& v : pop_mark("LIST")) append(list, std::move(v), "LIST");
          push(list);
          break;
        }
        case 'J': push(make_integer(static_cast<int32_t>(le<uint32_t>("BININT")))); break;
        case 'K': push(make_integer(u8("BININT1"))); break;
        case 'M': push(make_integer(le<uint16_t>("BININT2"))); break;
        case 0x8a: push(make_integer(long1())); break;  // LONG1
        case 'G': {  // BINFLOAT: big-endian IEEE double
          const uint64_t bits = __builtin_bswap64(le<uint64_t>("BINFLOAT"));
          PickleValuePtr v = make(Kind::floating);
          std::memcpy(&v->floating, &bits, sizeof bits);
          push(v);
          break;
        }
        case 'N': push(make(Kind::none)); break;
        case 0x88: push(make_boolean(true)); break;   // NEWTRUE
        case 0x89: push(make_boolean(false)); break;  // NEWFALSE
        case 'X': push(make_string(text(le<uint32_t>("BINUNICODE"), "BINUNICODE"))); break;
        case 0x8c: push(make_string(text(u8("SHORT_BINUNICODE"), "SHORT_BINUNICODE"))); break;
        case 0x8d: push(make_string(text(le<uint64_t>("BINUNICODE8"), "BINUNICODE8"))); break;
        case 'q': memo_[u8("BINPUT")] = top("BINPUT"); break;
        case 'r': memo_[le<uint32_t>("LONG_BINPUT")] = top("LONG_BINPUT"); break;
        case 0x94: memo_[memo_.size()] = top("MEMOIZE"); break;
        case 'h': push(memo_get(u8("BINGET"), "BINGET")); break;
        case 'j': push(memo_get(le<uint32_t>("LONG_BINGET"), "LONG_BINGET")); break;
        case 'c': {  // GLOBAL: "module\nname\n"
          std::string module = line("GLOBAL");
          std::string name = line("GLOBAL");
          push(make_callable(module + " " + name));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          PickleValuePtr name = pop("STACK_GLOBAL"), module = pop("STACK_GLOBAL");
          if (module->kind != Kind::string || name->kind != Kind::string)
            fail("STACK_GLOBAL expects two strings, got ", module->kind_name(), " and ", name->kind_name());
          push(make_callable(module->text + " " + name->text));
          break;
        }
        case 'R': reduce(); break;
        case 'b': build(); break;
        case 's': {  // SETITEM
          std::vector<PickleValuePtr> kv = pop_n(2, "SETITEM");
          set_items(top("SETITEM"), std::move(kv), "SETITEM");
          break;
        }
        case 'u': {  // SETITEMS
          std::vector<PickleValuePtr> kv = pop_mark("SETITEMS");
          set_items(top("SETITEMS"), std::move(kv), "SETITEMS");
          break;
        }
        case 'a': {  // APPEND
          PickleValuePtr v = pop("APPEND");
          append(top("APPEND"), std::move(v), "APPEND");
          break;
        }
        case 'e': {  // APPENDS
          std::vector<PickleValuePtr> vs = pop_mark("APPENDS");
          const PickleValuePtr& list = top("APPENDS");
          for (PickleValuePtr& v : vs) append(list, std::move(v), "APPENDS");
          break;
        }
        case 'Q': push(persistent_load(pop("BINPERSID"))); break;
        default: {
          const char* name = refused_opcode_name(op);
          if (name) fail("opcode ", name, " is not used by a state dict; refusing to load it");
          fail("byte 0x", hex(op), " is not a pickle opcode this reader accepts; refusing to load it");
        }
      }
    }
  }

 private:
  // ---------------------------------------------------------------------------------------------- errors
  template <typename... Args>
  [[noreturn]] void fail(const Args&... args) const {
    throw IoError(detail::concat("torch checkpoint '", label_, "': data.pkl byte ", op_at_, ": ", args...));
  }
  static std::string hex(unsigned char b) {
    const char* digits = "0123456789abcdef";
    return {digits[b >> 4], digits[b & 15]};
  }

  // ---------------------------------------------------------------------------------------------- reading
  std::size_t position() const { return static_cast<std::size_t>(p_ - begin_); }
  std::size_t remaining() const { return static_cast<std::size_t>(end_ - p_); }
  void need(uint64_t n, const char* what) const {
    if (n > remaining()) fail(what, " needs ", n, " bytes, but the pickle ends after ", remaining(), " (truncated?)");
  }
  void skip(uint64_t n, const char* what) {
    need(n, what);
    p_ += n;
  }
  unsigned char u8(const char* what) {
    need(1, what);
    return *p_++;
  }
  template <typename T>
  T le(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_, sizeof(T));  // the host is little-endian, as the format
    p_ += sizeof(T);
    return v;
  }
  std::string text(uint64_t n, const char* what) {
    need(n, what);
    std::string s(reinterpret_cast<const char*>(p_), static_cast<std::size_t>(n));
    p_ += n;
    return s;
  }
  // A GLOBAL operand: text up to a newline, bounded so a missing newline cannot swallow the file.
  std::string line(const char* what) {
    constexpr std::size_t kMaxName = 256;
    const std::size_t limit = std::min(remaining(), kMaxName);
    const unsigned char* nl = static_cast<const unsigned char*>(std::memchr(p_, '\n', limit));
    if (!nl) fail(what, " operand has no newline within ", limit, " bytes");
    std::string s(reinterpret_cast<const char*>(p_), static_cast<std::size_t>(nl - p_));
    p_ = nl + 1;
    return s;
  }
  // LONG1: a little-endian two's-complement integer of n bytes.
  int64_t long1() {
    const unsigned char n = u8("LONG1");
    if (n > 8) fail("LONG1 integer of ", int(n), " bytes does not fit in int64");
    need(n, "LONG1");
    uint64_t v = 0;
    for (unsigned i = 0; i < n; ++i) v |= static_cast<uint64_t>(p_[i]) << (8 * i);
    if (n > 0 && n < 8 && (p_[n - 1] & 0x80)) v |= ~uint64_t{0} << (8 * n);  // sign-extend
    p_ += n;
    return static_cast<int64_t>(v);
  }

  // ---------------------------------------------------------------------------------------------- values
  static PickleValuePtr make(Kind kind) {
    auto v = std::make_shared<PickleValue>();
    v->kind = kind;
    return v;
  }
  static PickleValuePtr make_integer(int64_t i) {
    PickleValuePtr v = make(Kind::integer);
    v->integer = i;
    return v;
  }
  static PickleValuePtr make_boolean(bool b) {
    PickleValuePtr v = make(Kind::boolean);
    v->boolean = b;
    return v;
  }
  static PickleValuePtr make_string(std::string s) {
    PickleValuePtr v = make(Kind::string);
    v->text = std::move(s);
    return v;
  }
  PickleValuePtr make_callable(std::string global) const {
    if (!is_allowed_global(global))
      fail("global '", global, "' is not allowed in a state dict; refusing to load it");
    PickleValuePtr v = make(Kind::callable);
    v->text = std::move(global);
    return v;
  }
  PickleValuePtr make_tuple(std::vector<PickleValuePtr> items) {
    PickleValuePtr t = make(Kind::tuple);
    for (const PickleValuePtr& item : items) nest(*item, *t);
    t->items = std::move(items);
    return t;
  }

  // `child` goes inside `parent`: from now on it may not change, and parent's depth accounts for it.
  void nest(PickleValue& child, PickleValue& parent) const {
    child.nested = true;
    parent.depth = std::max(parent.depth, child.depth + 1);
    if (parent.depth > kMaxPickleDepth) fail("containers nest deeper than ", kMaxPickleDepth, " levels");
  }
  void check_mutable(const PickleValue& container, Kind expected, const char* op) const {
    if (container.kind != expected)
      fail(op, " applies to a ", container.kind_name(), ", expected a ", expected == Kind::dict ? "dict" : "list");
    if (container.nested) fail(op, " changes a ", container.kind_name(), " after it was put inside another value");
  }
  void check_storable(const PickleValue& v, const char* op) const {
    if (v.kind == Kind::callable || v.kind == Kind::storage)
      fail(op, " stores a bare ", v.kind == Kind::callable ? "class or function '" + v.text + "'" : "storage",
           " in a container; a state dict holds none");
  }

  void set_items(const PickleValuePtr& dict, std::vector<PickleValuePtr> kv, const char* op) {
    check_mutable(*dict, Kind::dict, op);
    if (kv.size() % 2 != 0) fail(op, " has an odd number (", kv.size(), ") of keys and values");
    for (std::size_t i = 0; i < kv.size(); i += 2) {
      PickleValue& key = *kv[i];
      if (key.kind == Kind::list || key.kind == Kind::dict) fail(op, " uses a ", key.kind_name(), " as a dict key");
      check_storable(key, op);
      check_storable(*kv[i + 1], op);
      nest(key, *dict);
      nest(*kv[i + 1], *dict);
      dict->entries.emplace_back(std::move(kv[i]), std::move(kv[i + 1]));
    }
  }
  void append(const PickleValuePtr& list, PickleValuePtr v, const char* op) {
    check_mutable(*list, Kind::list, op);
    check_storable(*v, op);
    nest(*v, *list);
    list->items.push_back(std::move(v));
  }

  // ---------------------------------------------------------------------------------------------- stack
  void push(PickleValuePtr v) { stack_.push_back(std::move(v)); }
  std::size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }  // values below a mark are not ours
  PickleValuePtr pop(const char* op) {
    if (stack_.size() <= floor()) fail(op, " pops from an empty stack");
    PickleValuePtr v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  const PickleValuePtr& top(const char* op) const {
    if (stack_.size() <= floor()) fail(op, " needs a value on the stack, and there is none");
    return stack_.back();
  }
  std::vector<PickleValuePtr> pop_n(std::size_t n, const char* op) {
    if (stack_.size() < floor() + n) fail(op, " needs ", n, " values on the stack");
    std::vector<PickleValuePtr> out(std::make_move_iterator(stack_.end() - static_cast<std::ptrdiff_t>(n)),
                                    std::make_move_iterator(stack_.end()));
    stack_.resize(stack_.size() - n);
    return out;
  }
  std::vector<PickleValuePtr> pop_mark(const char* op) {
    if (marks_.empty()) fail(op, " without a MARK");
    const std::size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<PickleValuePtr> out(std::make_move_iterator(stack_.begin() + static_cast<std::ptrdiff_t>(mark)),
                                    std::make_move_iterator(stack_.end()));
    stack_.resize(mark);
    return out;
  }
  PickleValuePtr memo_get(uint64_t index, const char* op) const {
    auto it = memo_.find(index);
    if (it == memo_.end()) fail(op, " reads memo slot ", index, ", which was never written");
    return it->second;
  }

  PickleValuePtr stop() {
    if (!marks_.empty()) fail("STOP with a MARK still open");
    if (stack_.size() != 1) fail("STOP with ", stack_.size(), " values on the stack, expected 1");
    return stack_.back();
  }

  // ---------------------------------------------------------------------------------------------- torch
  // BINPERSID: the tuple ('storage', <storage type>, key, location, numel) names one storage of the archive.
  PickleValuePtr persistent_load(const PickleValuePtr& id) const {
    const auto& f = id->items;
    if (id->kind != Kind::tuple || f.size() != 5 || f[0]->kind != Kind::string || f[0]->text != "storage")
      fail("persistent id is not ('storage', type, key, location, numel)");
    if (f[1]->kind != Kind::callable || !is_storage_type(f[1]->text))
      fail("persistent id names '", f[1]->kind == Kind::callable ? f[1]->text : f[1]->kind_name(),
           "' where a storage type belongs");
    if (f[2]->kind != Kind::string || f[3]->kind != Kind::string || f[4]->kind != Kind::integer)
      fail("persistent id fields are ", f[2]->kind_name(), ", ", f[3]->kind_name(), ", ", f[4]->kind_name(),
           ", expected string key, string location, integer numel");
    if (f[4]->integer < 0) fail("storage '", f[2]->text, "' has negative numel ", f[4]->integer);
    auto storage = std::make_shared<PickledStorage>();
    storage->storage_type = f[1]->text.substr(6);  // drop "torch "
    storage->key = f[2]->text;
    storage->location = f[3]->text;
    storage->numel = f[4]->integer;
    PickleValuePtr v = make(Kind::storage);
    v->storage = std::move(storage);
    return v;
  }

  std::vector<int64_t> int_tuple(const PickleValue& v, const char* what) const {
    if (v.kind != Kind::tuple) fail("_rebuild_tensor_v2: ", what, " is a ", v.kind_name(), ", expected a tuple");
    std::vector<int64_t> out;
    for (const PickleValuePtr& item : v.items) {
      if (item->kind != Kind::integer)
        fail("_rebuild_tensor_v2: ", what, " holds a ", item->kind_name(), ", expected integers");
      out.push_back(item->integer);
    }
    return out;
  }

  // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
  PickleValuePtr rebuild_tensor(const std::vector<PickleValuePtr>& a) const {
    if (a.size() != 6 && a.size() != 7) fail("_rebuild_tensor_v2 takes 6 or 7 arguments, got ", a.size());
    if (a[0]->kind != Kind::storage) fail("_rebuild_tensor_v2: argument 1 is a ", a[0]->kind_name(), ", expected a storage");
    if (a[1]->kind != Kind::integer) fail("_rebuild_tensor_v2: storage offset is a ", a[1]->kind_name());
    if (a[4]->kind != Kind::boolean) fail("_rebuild_tensor_v2: requires_grad is a ", a[4]->kind_name());
    // Hooks cannot survive pickling (torch warns and drops them), so an empty dict is all a real file has.
    if (a[5]->kind != Kind::dict || !a[5]->entries.empty())
      fail("_rebuild_tensor_v2: backward hooks must be an empty dict");
    // Tensor metadata carries conjugate/negative bits of complex views, which no supported dtype has.
    if (a.size() == 7 && a[6]->kind != Kind::none && !(a[6]->kind == Kind::dict && a[6]->entries.empty()))
      fail("_rebuild_tensor_v2: tensor metadata is not supported");
    PickleValuePtr t = make(Kind::tensor);
    t->tensor.storage = a[0]->storage;
    t->tensor.storage_offset = a[1]->integer;
    t->tensor.size = int_tuple(*a[2], "size");
    t->tensor.stride = int_tuple(*a[3], "stride");
    t->tensor.requires_grad = a[4]->boolean;
    return t;
  }

  // (data, requires_grad, backward_hooks[, state]): the parameter's own Python state is not needed to read it.
  PickleValuePtr rebuild_parameter(const std::vector<PickleValuePtr>& a, std::size_t arity, const char* name) const {
    if (a.size() != arity) fail(name, " takes ", arity, " arguments, got ", a.size());
    if (a[0]->kind != Kind::tensor) fail(name, ": data is a ", a[0]->kind_name(), ", expected a tensor");
    if (a[1]->kind != Kind::boolean) fail(name, ": requires_grad is a ", a[1]->kind_name());
    PickleValuePtr t = make(Kind::tensor);
    t->tensor = a[0]->tensor;
    t->tensor.requires_grad = a[1]->boolean;
    t->tensor.is_parameter = true;
    return t;
  }

  void reduce() {
    PickleValuePtr args = pop("REDUCE");
    PickleValuePtr callable = pop("REDUCE");
    if (callable->kind != Kind::callable) fail("REDUCE calls a ", callable->kind_name());
    if (args->kind != Kind::tuple) fail("REDUCE arguments are a ", args->kind_name(), ", expected a tuple");
    const std::string& f = callable->text;
    if (f == kOrderedDict) {
      if (!args->items.empty()) fail("OrderedDict is rebuilt with arguments; torch.save passes none");
      push(make(Kind::dict));
    } else if (f == kRebuildTensor) {
      push(rebuild_tensor(args->items));
    } else if (f == kRebuildParameter) {
      push(rebuild_parameter(args->items, 3, "_rebuild_parameter"));
    } else if (f == kRebuildParameterWithState) {
      push(rebuild_parameter(args->items, 4, "_rebuild_parameter_with_state"));
    } else {
      fail("REDUCE calls '", f, "', which a state dict never calls; refusing to load it");
    }
  }

  // BUILD sets attributes. A state dict's only attribute is `_metadata` (module versions), which we do not need;
  // a parameter rebuilt with state has already dropped it.
  void build() {
    PickleValuePtr state = pop("BUILD");
    const PickleValuePtr& object = top("BUILD");
    if (object->kind != Kind::dict) fail("BUILD sets attributes on a ", object->kind_name(), "; only a state dict's _metadata is accepted");
    if (state->kind != Kind::dict) fail("BUILD state is a ", state->kind_name(), ", expected a dict");
    for (const auto& [key, value] : state->entries)
      if (key->kind != Kind::string || key->text != "_metadata")
        fail("BUILD sets attribute '", key->kind == Kind::string ? key->text : key->kind_name(),
             "' on a dict; only a state dict's _metadata is accepted");
  }

  const std::string& label_;
  const unsigned char* begin_;
  const unsigned char* p_;
  const unsigned char* end_;
  std::size_t op_at_ = 0;
  std::vector<PickleValuePtr> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<uint64_t, PickleValuePtr> memo_;
};

}  // namespace

const char* PickleValue::kind_name() const {
  switch (kind) {
    case Kind::none: return "None";
    case Kind::boolean: return "bool";
    case Kind::integer: return "int";
    case Kind::floating: return "float";
    case Kind::string: return "string";
    case Kind::tuple: return "tuple";
    case Kind::list: return "list";
    case Kind::dict: return "dict";
    case Kind::tensor: return "tensor";
    case Kind::callable: return "class or function";
    case Kind::storage: return "storage";
  }
  return "?";
}

PickleValuePtr unpickle_torch(const std::string& label, const unsigned char* bytes, std::size_t n) {
  if (n == 0) throw IoError(detail::concat("torch checkpoint '", label, "': data.pkl is empty"));
  return Unpickler(label, bytes, n).run();
}

}  // namespace shardrt
