// io/safetensors.h: read and write the safetensors format (https://github.com/huggingface/safetensors),
// so checkpoints and weights move freely between shardlm, PyTorch and the Hugging Face hub.
//   [u64 little-endian N] [N bytes of UTF-8 JSON header] [data buffer]
//   header: {"<name>": {"dtype": "F32", "shape": [2, 2], "data_offsets": [begin, end]}, ...,
//            "__metadata__": {"key": "value", ...}}   (offsets relative to the start of the data buffer)
// The reader mmaps the file read-only and validates every header field before anything uses it; errors
// name the file, the tensor and the field. The writer streams tensors (by copy or by reference) through
// io::AtomicFile, so a crash never leaves a half-written checkpoint.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardlm/core/dtype.h"

namespace shardlm::io {

struct TensorInfo {
    std::string name;
    std::string dtype;  // as in the file: "F32", "BF16", ...
    std::vector<int64_t> shape;
    size_t offset = 0;  // absolute byte offset in the file
    size_t nbytes = 0;
    int64_t numel() const;
};

// Bytes per element of a safetensors dtype ("F32" -> 4, "BF16" -> 2, "I64" -> 8, "BOOL" -> 1, ...);
// 0 if unknown (or sub-byte, like "F4").
size_t safetensors_dtype_bytes(std::string_view dtype);
// "[60, 120]".
std::string shape_str(std::span<const int64_t> shape);

// Largest header accepted (the reference implementation's limit).
inline constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

class SafetensorsReader {
public:
    // Opens, mmaps read-only and validates the header. Throws shardlm::Error naming the file and the
    // field on any problem (truncated, bad JSON, offsets out of range, dtype/shape/size disagreement,
    // overlapping tensors, duplicate names).
    explicit SafetensorsReader(const std::string& path);
    SafetensorsReader(const SafetensorsReader&) = delete;
    SafetensorsReader& operator=(const SafetensorsReader&) = delete;
    SafetensorsReader(SafetensorsReader&& o) noexcept;
    SafetensorsReader& operator=(SafetensorsReader&& o) noexcept;
    ~SafetensorsReader();

    const std::string& path() const { return path_; }
    // Sorted by offset (file order).
    const std::vector<TensorInfo>& tensors() const { return tensors_; }
    const TensorInfo* find(std::string_view name) const;  // nullptr if absent
    // Error naming the file, the tensor and the first few available names if absent.
    const TensorInfo& get(std::string_view name) const;
    // Start of the tensor's bytes in the mapping; valid while the reader lives. NOT necessarily aligned
    // to the element size (the format does not require it): copy or memcpy before typed access.
    const void* data(const TensorInfo& t) const { return base_ + t.offset; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    size_t file_size() const { return size_; }

    // Reads a float tensor (F32, F16 or BF16 in the file) as fp32 into out (expect numel floats),
    // after checking that its shape is exactly expect_shape. Other dtypes are a clear error.
    void read_f32(std::string_view name, std::span<const int64_t> expect_shape, float* out) const;
    void read_f32(std::string_view name, std::initializer_list<int64_t> expect_shape, float* out) const {
        read_f32(name, std::span<const int64_t>(expect_shape.begin(), expect_shape.size()), out);
    }
    // Whole tensor as fp32, any shape (F32, F16 or BF16 in the file).
    std::vector<float> read_f32(std::string_view name) const;
    // An I32 tensor (any shape), e.g. token ids in test fixtures.
    std::vector<int32_t> read_i32(std::string_view name) const;

private:
    void parse_header();
    void close() noexcept;

    std::string path_;
    const unsigned char* base_ = nullptr;  // mmap of the whole file
    size_t size_ = 0;
    std::vector<TensorInfo> tensors_;
    std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
    std::map<std::string, std::string> metadata_;
};

class SafetensorsWriter {
public:
    // Adds a tensor; data is copied now (converted from fp32 to dtype if dtype is F16/BF16).
    void add_f32(std::string name, std::vector<int64_t> shape, const float* data, DType dtype = DType::F32);
    // Adds a tensor by reference: only the pointer is kept, and the data is streamed (converted to
    // dtype in chunks if not F32) at write(). The caller keeps the memory alive and unchanged until then.
    void add_f32_ref(std::string name, std::vector<int64_t> shape, const float* data, DType dtype = DType::F32);
    // Adds a tensor of any safetensors dtype from raw little-endian bytes (copied now);
    // nbytes must equal product(shape) * dtype size.
    void add_raw(std::string name, std::string dtype, std::vector<int64_t> shape, const void* data, size_t nbytes);
    void set_metadata(std::string key, std::string value);

    // Writes atomically via io::AtomicFile (temp, fsync, rename). The header is padded with spaces to a
    // multiple of 8 bytes; tensors are packed in insertion order. May be called more than once.
    void write(const std::string& path) const;
    // The file write() produces, in memory.
    std::string bytes() const;
    // Size in bytes of the file write() produces.
    size_t size_bytes() const;
    size_t num_tensors() const { return entries_.size(); }

private:
    struct Entry {
        std::string name;
        std::string dtype;
        std::vector<int64_t> shape;
        size_t nbytes = 0;
        std::vector<unsigned char> owned;  // copied bytes, already in the file's dtype
        const float* ref = nullptr;        // or: borrowed fp32, converted to ref_dtype at write()
        DType ref_dtype = DType::F32;
    };
    Entry& add_entry(std::string name, std::string dtype, std::vector<int64_t> shape);
    template <class Sink>
    void emit(Sink&& sink) const;  // the file's bytes, in order, to sink(pointer, bytes)
    std::string header() const;  // JSON + padding

    std::vector<Entry> entries_;
    std::map<std::string, size_t, std::less<>> index_;
    std::map<std::string, std::string> metadata_;
};

}  // namespace shardlm::io
