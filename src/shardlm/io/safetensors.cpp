#include "shardlm/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "shardlm/core/check.h"
#include "shardlm/io/atomic_file.h"

namespace shardlm::io {

namespace {

constexpr const char* kCorruptHint =
    "\n---> HINT: the file is corrupt, truncated or not a safetensors file (an interrupted copy or download?); "
    "re-create or re-download it";
constexpr const char* kDtypeList = "BOOL, U8, I8, F8_E4M3, F8_E5M2, F8_E8M0, I16, U16, F16, BF16, I32, U32, F32, I64, U64, F64, C64";

// Elements of a shape, or -1 if a dimension is negative or the product overflows int64.
int64_t checked_numel(std::span<const int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) {
        if (d < 0) return -1;
        if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return -1;
        n *= d;
    }
    return n;
}

// numel * elem bytes, or false on overflow.
bool checked_bytes(int64_t numel, size_t elem, size_t* out) {
    if (numel < 0) return false;
    auto n = static_cast<uint64_t>(numel);
    if (elem != 0 && n > std::numeric_limits<size_t>::max() / elem) return false;
    *out = static_cast<size_t>(n * elem);
    return true;
}

// A JSON value's type, for error messages.
const char* json_kind(const nlohmann::json& j) { return j.type_name(); }

}  // namespace

int64_t TensorInfo::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

size_t safetensors_dtype_bytes(std::string_view d) {
    if (d == "F32" || d == "I32" || d == "U32") return 4;
    if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
    if (d == "F64" || d == "I64" || d == "U64") return 8;
    if (d == "U8" || d == "I8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2" || d == "F8_E8M0") return 1;
    if (d == "C64") return 8;
    return 0;
}

std::string shape_str(std::span<const int64_t> shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); i++) {
        if (i) s += ", ";
        s += std::to_string(shape[i]);
    }
    return s + "]";
}

// ------------------------------------------------------------------------------------------------
// Reader

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    SHARDLM_CHECK(fd >= 0, path, ": cannot open safetensors file (", std::strerror(errno), ")",
                  "\n---> HINT: check the path; checkpoints are <run dir>/<step>/model.safetensors");
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        int err = errno;
        ::close(fd);
        fail(path, ": cannot stat safetensors file (", std::strerror(err), ")");
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        fail(path, ": not a regular file\n---> HINT: pass the path of a .safetensors file");
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ < 8) {
        ::close(fd);
        fail(path, ": file is ", size_, " bytes, too short for the 8-byte safetensors header length", kCorruptHint);
    }
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);  // the mapping keeps the file alive
    SHARDLM_CHECK(p != MAP_FAILED, path, ": cannot mmap ", size_, " bytes (", std::strerror(err), ")");
    base_ = static_cast<const unsigned char*>(p);
    try {
        parse_header();
    } catch (...) {
        close();
        throw;
    }
}

SafetensorsReader::SafetensorsReader(SafetensorsReader&& o) noexcept
    : path_(std::move(o.path_)),
      base_(std::exchange(o.base_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      tensors_(std::move(o.tensors_)),
      index_(std::move(o.index_)),
      metadata_(std::move(o.metadata_)) {}

SafetensorsReader& SafetensorsReader::operator=(SafetensorsReader&& o) noexcept {
    if (this != &o) {
        close();
        path_ = std::move(o.path_);
        base_ = std::exchange(o.base_, nullptr);
        size_ = std::exchange(o.size_, 0);
        tensors_ = std::move(o.tensors_);
        index_ = std::move(o.index_);
        metadata_ = std::move(o.metadata_);
    }
    return *this;
}

SafetensorsReader::~SafetensorsReader() { close(); }

void SafetensorsReader::close() noexcept {
    if (base_) ::munmap(const_cast<unsigned char*>(base_), size_);
    base_ = nullptr;
    size_ = 0;
}

namespace {

using nlohmann::json;

// The header's JSON object; a tensor named twice is an error (nlohmann silently keeps the last one).
json parse_header_json(const std::string& f, const uint8_t* begin, const uint8_t* end, uint64_t n) {
    std::set<std::string> seen;
    std::string dup;
    json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
        if (ev == json::parse_event_t::key && depth == 1 && parsed.is_string()) {
            if (!seen.insert(parsed.get<std::string>()).second && dup.empty()) dup = parsed.get<std::string>();
        }
        return true;
    };
    json h;
    try {
        h = json::parse(begin, end, cb);
    } catch (const json::exception& e) {
        fail(f, ": header (", n, " bytes) is not valid JSON: ", e.what(), kCorruptHint);
    }
    SHARDLM_CHECK(h.is_object(), f, ": header is a JSON ", json_kind(h), ", expected an object of tensors", kCorruptHint);
    SHARDLM_CHECK(dup.empty(), f, ": tensor '", dup, "' appears twice in the header", kCorruptHint);
    return h;
}

void read_metadata(const std::string& f, const json& v, std::map<std::string, std::string>* metadata) {
    SHARDLM_CHECK(v.is_object(), f, ": field '__metadata__' is a JSON ", json_kind(v),
                  ", expected an object of string -> string", kCorruptHint);
    for (auto m = v.begin(); m != v.end(); ++m) {
        SHARDLM_CHECK(m.value().is_string(), f, ": field '__metadata__': value of key '", m.key(), "' is a JSON ",
                      json_kind(m.value()), ", expected a string", kCorruptHint);
        (*metadata)[m.key()] = m.value().get<std::string>();
    }
}

// Where the data buffer lies in the file: what a tensor's offsets are checked against.
struct DataBuffer {
    size_t start, size;  // after the 8-byte length and the n-byte header
    uint64_t header_bytes;
    size_t file_bytes;
};

// One tensor's entry {dtype, shape, data_offsets}, every field checked against the data buffer.
TensorInfo read_tensor_entry(const std::string& f, const std::string& name, const json& v, const DataBuffer& d) {
    auto where = [&](const char* field) { return cat(f, ": tensor '", name, "': field '", field, "'"); };
    SHARDLM_CHECK(v.is_object(), f, ": tensor '", name, "' is a JSON ", json_kind(v),
                  ", expected an object with dtype, shape and data_offsets", kCorruptHint);
    TensorInfo t;
    t.name = name;
    auto dt = v.find("dtype");
    SHARDLM_CHECK(dt != v.end(), where("dtype"), " is missing", kCorruptHint);
    SHARDLM_CHECK(dt->is_string(), where("dtype"), " is a JSON ", json_kind(*dt), ", expected a string", kCorruptHint);
    t.dtype = dt->get<std::string>();
    size_t elem = safetensors_dtype_bytes(t.dtype);
    SHARDLM_CHECK(elem != 0, where("dtype"), ": unsupported dtype '", t.dtype, "' (supported: ", kDtypeList,
                  ")\n---> HINT: convert the tensor to one of these (e.g. F32) before loading");

    auto sh = v.find("shape");
    SHARDLM_CHECK(sh != v.end(), where("shape"), " is missing", kCorruptHint);
    SHARDLM_CHECK(sh->is_array(), where("shape"), " is a JSON ", json_kind(*sh), ", expected an array of integers",
                  kCorruptHint);
    for (size_t i = 0; i < sh->size(); i++) {
        const json& dim = (*sh)[i];
        SHARDLM_CHECK(dim.is_number_integer() && dim.get<int64_t>() >= 0 &&
                          !(dim.is_number_unsigned() && dim.get<uint64_t>() > uint64_t(INT64_MAX)),
                      where("shape"), ": dimension ", i, " is ", dim.dump(), ", expected an integer >= 0", kCorruptHint);
        t.shape.push_back(dim.get<int64_t>());
    }
    int64_t numel = checked_numel(t.shape);
    size_t need = 0;
    SHARDLM_CHECK(numel >= 0 && checked_bytes(numel, elem, &need), where("shape"), ": ", shape_str(t.shape), " overflows",
                  kCorruptHint);

    auto off = v.find("data_offsets");
    SHARDLM_CHECK(off != v.end(), where("data_offsets"), " is missing", kCorruptHint);
    SHARDLM_CHECK(off->is_array() && off->size() == 2 && (*off)[0].is_number_unsigned() && (*off)[1].is_number_unsigned(),
                  where("data_offsets"), " is ", off->dump(), ", expected [begin, end] with integers >= 0", kCorruptHint);
    uint64_t b = (*off)[0].get<uint64_t>(), e = (*off)[1].get<uint64_t>();
    SHARDLM_CHECK(b <= e, where("data_offsets"), " is [", b, ", ", e, "]: begin > end", kCorruptHint);
    SHARDLM_CHECK(e <= d.size, where("data_offsets"), " is [", b, ", ", e, "], beyond the data buffer (", d.size,
                  " bytes after the ", d.header_bytes, "-byte header; file is ", d.file_bytes, " bytes)", kCorruptHint);
    SHARDLM_CHECK(e - b == need, where("data_offsets"), " is [", b, ", ", e, "] (", e - b, " bytes) but dtype ", t.dtype,
                  " shape ", shape_str(t.shape), " needs ", need, " bytes", kCorruptHint);
    t.offset = d.start + static_cast<size_t>(b);
    t.nbytes = need;
    return t;
}

// No two non-empty tensors may share bytes (tensors sorted by offset).
void check_no_overlap(const std::string& f, const std::vector<TensorInfo>& tensors) {
    const TensorInfo* prev = nullptr;
    for (const TensorInfo& t : tensors) {
        if (t.nbytes == 0) continue;
        if (prev)
            SHARDLM_CHECK(t.offset >= prev->offset + prev->nbytes, f, ": tensor '", t.name,
                          "': field 'data_offsets' overlaps tensor '", prev->name, "'", kCorruptHint);
        prev = &t;
    }
}

}  // namespace

void SafetensorsReader::parse_header() {
    const std::string& f = path_;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | base_[i];  // little-endian u64
    SHARDLM_CHECK(n <= kSafetensorsMaxHeader, f, ": header length ", n, " bytes exceeds the limit of ",
                  kSafetensorsMaxHeader, kCorruptHint);
    SHARDLM_CHECK(n <= size_ - 8, f, ": header length ", n, " bytes exceeds the file (", size_, " bytes, so at most ",
                  size_ - 8, ")", kCorruptHint);
    const DataBuffer data{8 + static_cast<size_t>(n), size_ - (8 + static_cast<size_t>(n)), n, size_};
    const json h = parse_header_json(f, base_ + 8, base_ + data.start, n);
    tensors_.reserve(h.size());
    for (auto it = h.begin(); it != h.end(); ++it) {
        if (it.key() == "__metadata__") read_metadata(f, it.value(), &metadata_);
        else tensors_.push_back(read_tensor_entry(f, it.key(), it.value(), data));
    }
    std::sort(tensors_.begin(), tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
        return a.offset != b.offset ? a.offset < b.offset : a.name < b.name;
    });
    check_no_overlap(f, tensors_);
    for (size_t i = 0; i < tensors_.size(); i++) index_.emplace(tensors_[i].name, i);
}

const TensorInfo* SafetensorsReader::find(std::string_view name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& SafetensorsReader::get(std::string_view name) const {
    if (const TensorInfo* t = find(name)) return *t;
    constexpr size_t kShow = 8;
    std::string avail;
    for (size_t i = 0; i < tensors_.size() && i < kShow; i++) avail += (i ? ", " : "") + tensors_[i].name;
    if (tensors_.size() > kShow) avail += cat(", ... (", tensors_.size() - kShow, " more)");
    if (tensors_.empty()) avail = "none";
    fail(path_, ": no tensor '", name, "' (", tensors_.size(), " tensors; available: ", avail, ")",
         "\n---> HINT: check the tensor name; the file may come from a different model or config");
}

void SafetensorsReader::read_f32(std::string_view name, std::span<const int64_t> expect_shape, float* out) const {
    const TensorInfo& t = get(name);
    DType dt;
    SHARDLM_CHECK(dtype_from_name(t.dtype, &dt), path_, ": tensor '", t.name, "' has dtype ", t.dtype,
                  ", expected a float tensor (F32, F16 or BF16)");
    SHARDLM_CHECK(std::equal(t.shape.begin(), t.shape.end(), expect_shape.begin(), expect_shape.end()), path_,
                  ": tensor '", t.name, "' has shape ", shape_str(t.shape), ", expected ", shape_str(expect_shape),
                  "\n---> HINT: the model config does not match the one the file was written with");
    const size_t n = static_cast<size_t>(t.numel());
    if (n == 0) return;
    const unsigned char* src = base_ + t.offset;
    if (dt == DType::F32 || t.offset % dtype_bytes(dt) == 0) {  // F32 converts by memcpy: alignment is moot
        convert_to_f32(out, src, dt, n);
        return;
    }
    // A 16-bit tensor at an odd offset (legal in the format): go through an aligned bounce buffer.
    constexpr size_t kChunk = 1 << 14;
    uint16_t tmp[kChunk];
    for (size_t i = 0; i < n; i += kChunk) {
        size_t k = std::min(kChunk, n - i);
        std::memcpy(tmp, src + 2 * i, 2 * k);
        convert_to_f32(out + i, tmp, dt, k);
    }
}

std::vector<float> SafetensorsReader::read_f32(std::string_view name) const {
    const TensorInfo& t = get(name);
    std::vector<float> out(static_cast<size_t>(t.numel()));
    read_f32(name, t.shape, out.data());
    return out;
}

std::vector<int32_t> SafetensorsReader::read_i32(std::string_view name) const {
    const TensorInfo& t = get(name);
    SHARDLM_CHECK(t.dtype == "I32", path_, ": tensor '", t.name, "' has dtype ", t.dtype, ", expected I32");
    std::vector<int32_t> out(static_cast<size_t>(t.numel()));
    if (!out.empty()) std::memcpy(out.data(), base_ + t.offset, t.nbytes);
    return out;
}

// ------------------------------------------------------------------------------------------------
// Writer

SafetensorsWriter::Entry& SafetensorsWriter::add_entry(std::string name, std::string dtype,
                                                       std::vector<int64_t> shape) {
    SHARDLM_CHECK(!name.empty(), "safetensors writer: empty tensor name");
    SHARDLM_CHECK(name != "__metadata__", "safetensors writer: '__metadata__' is reserved and cannot name a tensor",
                  "\n---> HINT: use set_metadata() for metadata");
    SHARDLM_CHECK(!index_.contains(name), "safetensors writer: tensor '", name, "' added twice");
    size_t elem = safetensors_dtype_bytes(dtype);
    SHARDLM_CHECK(elem != 0, "safetensors writer: tensor '", name, "': unsupported dtype '", dtype,
                  "' (supported: ", kDtypeList, ")");
    int64_t numel = checked_numel(shape);
    size_t nbytes = 0;
    SHARDLM_CHECK(numel >= 0 && checked_bytes(numel, elem, &nbytes), "safetensors writer: tensor '", name,
                  "': invalid shape ", shape_str(shape), " (negative dimension or overflow)");
    index_.emplace(name, entries_.size());
    Entry& e = entries_.emplace_back();
    e.name = std::move(name);
    e.dtype = std::move(dtype);
    e.shape = std::move(shape);
    e.nbytes = nbytes;
    return e;
}

void SafetensorsWriter::add_f32(std::string name, std::vector<int64_t> shape, const float* data, DType dtype) {
    Entry& e = add_entry(std::move(name), std::string(dtype_name(dtype)), std::move(shape));
    const size_t n = e.nbytes / dtype_bytes(dtype);
    if (n == 0) return;
    if (!data) {
        std::string nm = e.name;
        index_.erase(nm);
        entries_.pop_back();
        fail("safetensors writer: tensor '", nm, "': null data for ", n, " elements");
    }
    e.owned.resize(e.nbytes);
    convert_from_f32(e.owned.data(), dtype, data, n);
}

void SafetensorsWriter::add_f32_ref(std::string name, std::vector<int64_t> shape, const float* data, DType dtype) {
    Entry& e = add_entry(std::move(name), std::string(dtype_name(dtype)), std::move(shape));
    if (e.nbytes != 0 && !data) {
        std::string nm = e.name;
        index_.erase(nm);
        entries_.pop_back();
        fail("safetensors writer: tensor '", nm, "': null data for ", e.nbytes / dtype_bytes(dtype), " elements");
    }
    e.ref = data;
    e.ref_dtype = dtype;
}

void SafetensorsWriter::add_raw(std::string name, std::string dtype, std::vector<int64_t> shape, const void* data,
                                size_t nbytes) {
    Entry& e = add_entry(std::move(name), std::move(dtype), std::move(shape));
    if (e.nbytes != nbytes || (nbytes != 0 && !data)) {
        std::string msg = cat("safetensors writer: tensor '", e.name, "': ", nbytes, " bytes given",
                              data ? "" : " (null data)", " but dtype ", e.dtype, " shape ", shape_str(e.shape),
                              " needs ", e.nbytes);
        index_.erase(e.name);
        entries_.pop_back();
        throw Error(msg);
    }
    e.owned.assign(static_cast<const unsigned char*>(data), static_cast<const unsigned char*>(data) + nbytes);
}

void SafetensorsWriter::set_metadata(std::string key, std::string value) { metadata_[std::move(key)] = std::move(value); }

std::string SafetensorsWriter::header() const {
    nlohmann::ordered_json h = nlohmann::ordered_json::object();
    if (!metadata_.empty()) {
        auto& m = h["__metadata__"] = nlohmann::ordered_json::object();
        for (const auto& [k, v] : metadata_) m[k] = v;
    }
    size_t off = 0;
    for (const Entry& e : entries_) {
        h[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {off, off + e.nbytes}}};
        off += e.nbytes;
    }
    std::string s;
    try {
        s = h.dump();
    } catch (const nlohmann::json::exception& ex) {
        fail("safetensors writer: a tensor name or metadata string is not valid UTF-8 (", ex.what(), ")");
    }
    s.resize((s.size() + 7) / 8 * 8, ' ');
    return s;
}

size_t SafetensorsWriter::size_bytes() const {
    size_t n = 8 + header().size();
    for (const Entry& e : entries_) n += e.nbytes;
    return n;
}

template <class Sink>
void SafetensorsWriter::emit(Sink&& sink) const {
    std::string h = header();
    unsigned char len[8];
    uint64_t n = h.size();
    for (int i = 0; i < 8; i++) len[i] = static_cast<unsigned char>(n >> (8 * i));
    sink(len, 8);
    sink(h.data(), h.size());
    std::vector<unsigned char> buf;
    for (const Entry& e : entries_) {
        if (e.nbytes == 0) continue;
        if (!e.ref) {
            sink(e.owned.data(), e.nbytes);
        } else if (e.ref_dtype == DType::F32) {
            sink(e.ref, e.nbytes);
        } else {
            constexpr size_t kChunk = 1 << 16;
            const size_t eb = dtype_bytes(e.ref_dtype), total = e.nbytes / eb;
            buf.resize(kChunk * eb);
            for (size_t i = 0; i < total; i += kChunk) {
                size_t k = std::min(kChunk, total - i);
                convert_from_f32(buf.data(), e.ref_dtype, e.ref + i, k);
                sink(buf.data(), k * eb);
            }
        }
    }
}

void SafetensorsWriter::write(const std::string& path) const {
    AtomicFile out(path);
    emit([&](const void* p, size_t n) { out.write(p, n); });
    out.commit();
}

std::string SafetensorsWriter::bytes() const {
    std::string out;
    out.reserve(size_bytes());
    emit([&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); });
    return out;
}

}  // namespace shardlm::io
