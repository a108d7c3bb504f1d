// Tests for io/safetensors: round trips through our writer, and the reader against hand-built bytes
// from the format spec, plus every kind of corrupt file.
#include "shardlm/io/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "shardlm/core/check.h"
#include "shardlm/core/dtype.h"
#include "shardlm/io/atomic_file.h"

namespace fs = std::filesystem;
using shardlm::DType;
using shardlm::Error;
using shardlm::io::SafetensorsReader;
using shardlm::io::SafetensorsWriter;
using shardlm::io::TensorInfo;

namespace {

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
struct TempDir {
    fs::path dir;
    TempDir() {
        static std::atomic<int> counter{0};
        dir = fs::temp_directory_path() /
              shardlm::cat("shardlm_test_safetensors_", ::getpid(), "_", counter++);
        fs::create_directories(dir);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(dir, ec);
    }
    std::string file(const std::string& name) const { return (dir / name).string(); }
};

void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), std::streamsize(bytes.size()));
    ASSERT_TRUE(f.good()) << path;
}

std::string u64le(uint64_t n) {
    std::string s(8, '\0');
    for (int i = 0; i < 8; i++) s[i] = char((n >> (8 * i)) & 0xff);
    return s;
}

// A file per the spec: u64 LE header length, the header exactly as given (no padding), then data.
std::string st_bytes(const std::string& header, const std::string& data) { return u64le(header.size()) + header + data; }

std::string f32_bytes(std::initializer_list<float> v) {
    std::string s(v.size() * 4, '\0');
    std::memcpy(s.data(), std::data(v), s.size());
    return s;
}

// Runs fn, expects a shardlm::Error whose message contains every one of `needles`.
void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> needles) {
    try {
        fn();
        ADD_FAILURE() << "expected shardlm::Error containing '" << *needles.begin() << "'";
    } catch (const Error& e) {
        std::string msg = e.what();
        for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
    }
}

std::vector<float> ramp(size_t n, float scale = 0.37f) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = std::sin(float(i) * scale) * (1.0f + float(i % 7)) - 0.25f;
    return v;
}

}  // namespace

TEST(Safetensors, DtypeBytes) {
    EXPECT_EQ(shardlm::io::safetensors_dtype_bytes("F32"), 4u);
    EXPECT_EQ(shardlm::io::safetensors_dtype_bytes("BF16"), 2u);
    EXPECT_EQ(shardlm::io::safetensors_dtype_bytes("F16"), 2u);
    EXPECT_EQ(shardlm::io::safetensors_dtype_bytes("I32"), 4u);
    EXPECT_EQ(shardlm::io::safetensors_dtype_bytes("I64"), 8u);
    EXPECT_EQ(shardlm::io::safetensors_dtype_bytes("U16"), 2u);
    EXPECT_EQ(shardlm::io::safetensors_dtype_bytes("U8"), 1u);
    EXPECT_EQ(shardlm::io::safetensors_dtype_bytes("BOOL"), 1u);
    EXPECT_EQ(shardlm::io::safetensors_dtype_bytes("f32"), 0u);
    EXPECT_EQ(shardlm::io::safetensors_dtype_bytes("Q4"), 0u);
}

TEST(Safetensors, RoundTripF32OddShapes) {
    TempDir td;
    std::string path = td.file("f32.safetensors");
    const std::vector<std::vector<int64_t>> shapes = {{3, 5, 7}, {1}, {}, {0, 4}, {13}, {2, 1, 3, 1}};
    std::vector<std::vector<float>> data;
    SafetensorsWriter w;
    for (size_t i = 0; i < shapes.size(); i++) {
        int64_t n = 1;
        for (int64_t d : shapes[i]) n *= d;
        data.push_back(ramp(size_t(n), 0.1f * float(i + 1)));
        w.add_f32(shardlm::cat("t", i), shapes[i], data.back().data());
    }
    w.write(path);
    EXPECT_EQ(fs::file_size(path), w.size_bytes());

    SafetensorsReader r(path);
    EXPECT_EQ(r.path(), path);
    ASSERT_EQ(r.tensors().size(), shapes.size());
    for (size_t i = 0; i < shapes.size(); i++) {
        std::string name = shardlm::cat("t", i);
        const TensorInfo& t = r.get(name);
        EXPECT_EQ(t.dtype, "F32");
        EXPECT_EQ(t.shape, shapes[i]);
        EXPECT_EQ(size_t(t.numel()), data[i].size());
        EXPECT_EQ(t.nbytes, data[i].size() * 4);
        EXPECT_EQ(t.offset % (i == 0 ? 8 : 4), 0u) << "header padded to 8, tensors packed";
        std::vector<float> out(data[i].size() + 1, -99.0f);
        r.read_f32(name, t.shape, out.data());
        EXPECT_TRUE(std::equal(data[i].begin(), data[i].end(), out.begin())) << name;
        EXPECT_EQ(out.back(), -99.0f) << "wrote past the tensor";
        EXPECT_EQ(r.read_f32(name), data[i]);
    }
    // Insertion order == file order (offsets increase).
    for (size_t i = 0; i < shapes.size(); i++) EXPECT_EQ(r.tensors()[i].name, shardlm::cat("t", i));
    EXPECT_EQ(r.find("t99"), nullptr);
    EXPECT_NE(r.find("t0"), nullptr);
}

TEST(Safetensors, RoundTripBF16AndF16) {
    TempDir td;
    std::string path = td.file("half.safetensors");
    std::vector<float> a = ramp(3 * 11), b = ramp(7 * 3 * 5, 1.3f);
    a[0] = 1e-8f;   // f16 subnormal / underflow territory
    a[1] = 70000;   // f16 overflow -> inf
    a[2] = -0.0f;
    SafetensorsWriter w;
    w.add_f32("a_bf16", {3, 11}, a.data(), DType::BF16);
    w.add_f32("a_f16", {3, 11}, a.data(), DType::F16);
    w.add_f32_ref("b_bf16", {7, 3, 5}, b.data(), DType::BF16);
    w.add_f32_ref("b_f16", {7, 3, 5}, b.data(), DType::F16);
    w.write(path);

    SafetensorsReader r(path);
    EXPECT_EQ(r.get("a_bf16").dtype, "BF16");
    EXPECT_EQ(r.get("a_f16").dtype, "F16");
    EXPECT_EQ(r.get("b_bf16").nbytes, b.size() * 2);
    auto check = [&](const std::string& name, const std::vector<float>& src, DType dt, std::vector<int64_t> shape) {
        std::vector<float> out(src.size());
        r.read_f32(name, shape, out.data());
        for (size_t i = 0; i < src.size(); i++) {
            float want = dt == DType::BF16 ? shardlm::bf16_to_f32(shardlm::f32_to_bf16(src[i]))
                                           : shardlm::f16_to_f32(shardlm::f32_to_f16(src[i]));
            ASSERT_EQ(std::memcmp(&out[i], &want, 4), 0) << name << "[" << i << "] " << out[i] << " vs " << want;
        }
        // The raw bytes are exactly the converted values.
        std::vector<uint16_t> raw(src.size());
        shardlm::convert_from_f32(raw.data(), dt, src.data(), src.size());
        EXPECT_EQ(0, std::memcmp(r.data(r.get(name)), raw.data(), raw.size() * 2)) << name;
    };
    check("a_bf16", a, DType::BF16, {3, 11});
    check("a_f16", a, DType::F16, {3, 11});
    check("b_bf16", b, DType::BF16, {7, 3, 5});
    check("b_f16", b, DType::F16, {7, 3, 5});
    std::vector<float> out(a.size());
    r.read_f32("a_f16", {3, 11}, out.data());
    EXPECT_TRUE(std::isinf(out[1]));
    EXPECT_TRUE(std::signbit(out[2]));
}

TEST(Safetensors, RoundTripI32AndRaw) {
    TempDir td;
    std::string path = td.file("ids.safetensors");
    std::vector<int32_t> ids = {50256, 0, -1, 2147483647, -2147483647 - 1, 7, 42};
    std::vector<int64_t> i64 = {1, -2, int64_t(1) << 40};
    std::vector<uint8_t> u8 = {0, 1, 255};
    SafetensorsWriter w;
    w.add_raw("tokens", "I32", {7}, ids.data(), ids.size() * 4);
    w.add_raw("ids64", "I64", {3, 1}, i64.data(), i64.size() * 8);
    w.add_raw("bytes", "U8", {3}, u8.data(), 3);  // leaves the next tensor at an odd offset
    w.add_raw("grid", "I32", {1, 3, 1}, ids.data(), 12);
    w.write(path);

    SafetensorsReader r(path);
    EXPECT_EQ(r.read_i32("tokens"), ids);
    EXPECT_EQ(r.read_i32("grid"), std::vector<int32_t>(ids.begin(), ids.begin() + 3));
    EXPECT_EQ(r.get("grid").offset % 2, 1u);
    EXPECT_EQ(r.get("ids64").dtype, "I64");
    EXPECT_EQ(r.get("ids64").shape, (std::vector<int64_t>{3, 1}));
    EXPECT_EQ(0, std::memcmp(r.data(r.get("ids64")), i64.data(), 24));
    EXPECT_EQ(0, std::memcmp(r.data(r.get("bytes")), u8.data(), 3));
    // Wrong dtype for the typed readers: clear errors naming file, tensor and dtype.
    expect_error([&] { r.read_f32("tokens", {7}, nullptr); }, {path, "'tokens'", "I32", "F32, F16 or BF16"});
    expect_error([&] { r.read_i32("ids64"); }, {path, "'ids64'", "I64", "expected I32"});
}

TEST(Safetensors, LargeRefTensorStreamsInChunks) {
    TempDir td;
    std::string path = td.file("big.safetensors");
    const size_t n = 3 * 65536 + 123;  // more than one conversion chunk, not a multiple of one
    std::vector<float> v = ramp(n, 0.001f);
    SafetensorsWriter w;
    w.add_f32_ref("w32", {int64_t(n)}, v.data());
    w.add_f32_ref("w16", {3, int64_t(n / 3)}, v.data(), DType::BF16);
    w.write(path);
    SafetensorsReader r(path);
    EXPECT_EQ(r.read_f32("w32"), v);
    std::vector<float> got = r.read_f32("w16");
    ASSERT_EQ(got.size(), n);
    for (size_t i = 0; i < n; i += 997) EXPECT_EQ(got[i], shardlm::bf16_to_f32(shardlm::f32_to_bf16(v[i]))) << i;
    EXPECT_EQ(got[n - 1], shardlm::bf16_to_f32(shardlm::f32_to_bf16(v[n - 1])));
}

// bytes() is the file write() writes (the checkpoints kept in memory send it, train/memory_checkpoint.h).
TEST(Safetensors, BytesAreTheFileWritten) {
    TempDir td;
    std::string path = td.file("same.safetensors");
    const size_t n = 65536 + 77;
    std::vector<float> v = ramp(n, 0.01f);
    SafetensorsWriter w;
    w.add_f32("copied", {7, 3}, v.data());
    w.add_f32_ref("f32", {int64_t(n)}, v.data());
    w.add_f32_ref("bf16", {int64_t(n)}, v.data(), DType::BF16);
    w.add_raw("odd", "U8", {3}, "abc", 3);
    w.set_metadata("format", "pt");
    w.write(path);
    const std::string b = w.bytes();
    EXPECT_EQ(b.size(), w.size_bytes());
    EXPECT_TRUE(b == shardlm::io::read_file(path));
}

TEST(Safetensors, MetadataRoundTrip) {
    TempDir td;
    std::string path = td.file("meta.safetensors");
    SafetensorsWriter w;
    w.set_metadata("format", "pt");
    w.set_metadata("config", R"({"n_layer": 12, "n_embd": 768})");
    w.set_metadata("empty", "");
    w.set_metadata("unicode", "h\xc3\xa9llo \xe2\x9c\x93");
    w.set_metadata("format", "shardlm");  // overwrite
    float x = 1.5f;
    w.add_f32("x", {}, &x);
    w.write(path);
    SafetensorsReader r(path);
    std::map<std::string, std::string> want = {{"format", "shardlm"},
                                               {"config", R"({"n_layer": 12, "n_embd": 768})"},
                                               {"empty", ""},
                                               {"unicode", "h\xc3\xa9llo \xe2\x9c\x93"}};
    EXPECT_EQ(r.metadata(), want);
    EXPECT_EQ(r.tensors().size(), 1u);  // __metadata__ is not a tensor
    EXPECT_EQ(r.read_f32("x"), std::vector<float>{1.5f});
}

TEST(Safetensors, WriterLayoutFollowsSpec) {
    TempDir td;
    std::string path = td.file("layout.safetensors");
    std::vector<float> a = {1, 2, 3}, b = {4, 5};
    SafetensorsWriter w;
    w.add_f32("a", {3}, a.data());
    w.add_f32("b", {1, 2}, b.data(), DType::BF16);
    w.write(path);
    std::string bytes = shardlm::io::read_file(path);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | uint8_t(bytes[i]);
    EXPECT_EQ(n % 8, 0u);
    ASSERT_EQ(bytes.size(), 8 + n + 12 + 4);
    std::string header = bytes.substr(8, n);
    EXPECT_EQ(header.front(), '{');
    EXPECT_NE(header.find(R"("a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]})"), std::string::npos) << header;
    EXPECT_NE(header.find(R"("b":{"dtype":"BF16","shape":[1,2],"data_offsets":[12,16]})"), std::string::npos)
        << header;
    EXPECT_EQ(header.find_first_not_of(' ', header.rfind('}') + 1), std::string::npos) << "padding is spaces";
    EXPECT_EQ(bytes.substr(8 + n, 12), f32_bytes({1, 2, 3}));
    // Atomic write leaves no temp file behind, and a second write replaces the file.
    w.write(path);
    size_t files = 0;
    for (const auto& e : fs::directory_iterator(td.dir)) files += e.is_regular_file();
    EXPECT_EQ(files, 1u);
}

TEST(Safetensors, ReadsHandBuiltSpecBytes) {
    TempDir td;
    std::string path = td.file("spec.safetensors");
    const std::string header = R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
    write_bytes(path, st_bytes(header, f32_bytes({1.0f, -2.0f, 3.5f, 1e-3f})));
    SafetensorsReader r(path);
    ASSERT_EQ(r.tensors().size(), 1u);
    const TensorInfo& t = r.tensors()[0];
    EXPECT_EQ(t.name, "a");
    EXPECT_EQ(t.dtype, "F32");
    EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 2}));
    EXPECT_EQ(t.numel(), 4);
    EXPECT_EQ(t.offset, 8 + header.size());
    EXPECT_EQ(t.nbytes, 16u);
    EXPECT_TRUE(r.metadata().empty());
    float out[4];
    r.read_f32("a", {2, 2}, out);
    EXPECT_EQ(out[0], 1.0f);
    EXPECT_EQ(out[1], -2.0f);
    EXPECT_EQ(out[2], 3.5f);
    EXPECT_EQ(out[3], 1e-3f);
}

TEST(Safetensors, ReadsHandBuiltMultiTensorUnalignedFile) {
    // Like a file from another writer: metadata, whitespace, keys not in offset order, an unpadded header
    // of odd length (so data is unaligned), a BF16 and an F16 tensor at odd absolute offsets.
    TempDir td;
    std::string path = td.file("multi.safetensors");
    const std::string header =
        R"({ "z": {"dtype": "BF16", "shape": [3], "data_offsets": [8, 14]},)"
        R"( "__metadata__": {"format": "pt"},)"
        R"( "h": {"shape": [1], "data_offsets": [14, 16], "dtype": "F16"},)"
        R"( "ids": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]},)"
        R"( "none": {"dtype": "F32", "shape": [0, 3], "data_offsets": [16, 16]} } )";
    ASSERT_EQ(header.size() % 2, 1u);
    std::string data;
    int32_t ids[2] = {5, -6};
    data.append(reinterpret_cast<const char*>(ids), 8);
    for (float f : {1.0f, -2.5f, 0.15625f}) {
        uint16_t h = shardlm::f32_to_bf16(f);
        data.append(reinterpret_cast<const char*>(&h), 2);
    }
    uint16_t h16 = 0x3c00;  // 1.0 in IEEE half
    data.append(reinterpret_cast<const char*>(&h16), 2);
    write_bytes(path, st_bytes(header, data));

    SafetensorsReader r(path);
    ASSERT_EQ(r.tensors().size(), 4u);
    EXPECT_EQ(r.tensors()[0].name, "ids");  // sorted by offset
    EXPECT_EQ(r.tensors()[1].name, "z");
    EXPECT_EQ(r.tensors()[2].name, "h");
    EXPECT_EQ(r.tensors()[3].name, "none");
    EXPECT_EQ(r.metadata().at("format"), "pt");
    EXPECT_EQ(r.get("z").offset % 2, 1u);
    EXPECT_EQ(r.read_i32("ids"), (std::vector<int32_t>{5, -6}));
    EXPECT_EQ(r.read_f32("z"), (std::vector<float>{1.0f, -2.5f, 0.15625f}));
    EXPECT_EQ(r.read_f32("h"), std::vector<float>{1.0f});
    EXPECT_TRUE(r.read_f32("none").empty());
    r.read_f32("none", {0, 3}, nullptr);
}

TEST(Safetensors, ShapeMismatchNamesFileTensorAndShapes) {
    TempDir td;
    std::string path = td.file("model.safetensors");
    std::vector<float> w(60 * 180, 0.5f);
    SafetensorsWriter wr;
    wr.add_f32("transformer.h.0.attn.c_attn.weight", {60, 180}, w.data());
    wr.write(path);
    SafetensorsReader r(path);
    std::vector<float> out(60 * 180);
    expect_error([&] { r.read_f32("transformer.h.0.attn.c_attn.weight", {60, 120}, out.data()); },
                 {path, "'transformer.h.0.attn.c_attn.weight'", "[60, 180]", "expected [60, 120]"});
    expect_error([&] { r.read_f32("transformer.h.0.attn.c_attn.weight", {60, 180, 1}, out.data()); },
                 {path, "[60, 180]", "[60, 180, 1]"});
    std::vector<int64_t> right = {60, 180};
    r.read_f32("transformer.h.0.attn.c_attn.weight", right, out.data());
    EXPECT_EQ(out[60 * 180 - 1], 0.5f);
}

TEST(Safetensors, MissingTensorListsNames) {
    TempDir td;
    std::string path = td.file("m.safetensors");
    SafetensorsWriter w;
    float x = 0;
    for (int i = 0; i < 12; i++) w.add_f32(shardlm::cat("w", i), {1}, &x);
    w.write(path);
    SafetensorsReader r(path);
    EXPECT_EQ(r.find("lm_head.weight"), nullptr);
    expect_error([&] { r.get("lm_head.weight"); }, {path, "'lm_head.weight'", "available: w0, w1, w2", "more"});
    expect_error([&] { r.read_f32("lm_head.weight"); }, {path, "'lm_head.weight'"});
    expect_error([&] { r.read_i32("lm_head.weight"); }, {path, "'lm_head.weight'"});
}

TEST(Safetensors, CorruptFilesNameFileTensorAndField) {
    TempDir td;
    const std::string good_data = f32_bytes({1, 2, 3, 4});
    auto ok_entry = [](const std::string& extra = "") {
        return R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})" + extra + "}";
    };
    struct Case {
        std::string what;
        std::string bytes;
        std::vector<std::string> needles;
    };
    const std::string hdr = ok_entry();
    std::vector<Case> cases = {
        {"empty file", "", {"too short"}},
        {"7 bytes", std::string(7, '\0'), {"too short"}},
        {"truncated header", u64le(hdr.size()) + hdr.substr(0, 20), {"header length", "exceeds the file"}},
        {"header length larger than file", u64le(1000) + hdr + good_data, {"header length 1000", "exceeds the file"}},
        {"huge header length", u64le(uint64_t(1) << 40) + hdr, {"exceeds the limit"}},
        {"header length ~2^64", u64le(~uint64_t(0)) + hdr, {"header length"}},
        {"bad JSON", st_bytes(R"({"a":{"dtype":"F32",)", good_data), {"not valid JSON"}},
        {"zero header", st_bytes("", good_data), {"not valid JSON"}},
        {"header not an object", st_bytes("[1,2]", ""), {"expected an object"}},
        {"tensor not an object", st_bytes(R"({"a":3})", ""), {"'a'", "expected an object"}},
        {"data_offsets out of range", st_bytes(R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})",
                                               good_data.substr(0, 12)),
         {"'a'", "data_offsets", "beyond the data buffer"}},
        {"data_offsets begin > end",
         st_bytes(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", good_data),
         {"'a'", "data_offsets", "begin > end"}},
        {"nbytes vs shape", st_bytes(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,16]}})", good_data),
         {"'a'", "data_offsets", "needs 24 bytes"}},
        {"nbytes vs dtype", st_bytes(R"({"a":{"dtype":"F16","shape":[2,2],"data_offsets":[0,16]}})", good_data),
         {"'a'", "F16", "needs 8 bytes"}},
        {"missing dtype", st_bytes(R"({"a":{"shape":[2,2],"data_offsets":[0,16]}})", good_data),
         {"'a'", "'dtype'", "missing"}},
        {"dtype not a string", st_bytes(R"({"a":{"dtype":4,"shape":[2,2],"data_offsets":[0,16]}})", good_data),
         {"'a'", "'dtype'", "expected a string"}},
        {"unknown dtype", st_bytes(R"({"a":{"dtype":"F33","shape":[2,2],"data_offsets":[0,16]}})", good_data),
         {"'a'", "'dtype'", "F33"}},
        {"missing shape", st_bytes(R"({"a":{"dtype":"F32","data_offsets":[0,16]}})", good_data),
         {"'a'", "'shape'", "missing"}},
        {"shape not an array", st_bytes(R"({"a":{"dtype":"F32","shape":4,"data_offsets":[0,16]}})", good_data),
         {"'a'", "'shape'", "expected an array"}},
        {"negative dim", st_bytes(R"({"a":{"dtype":"F32","shape":[-2,-2],"data_offsets":[0,16]}})", good_data),
         {"'a'", "'shape'", "dimension 0"}},
        {"float dim", st_bytes(R"({"a":{"dtype":"F32","shape":[2,2.0],"data_offsets":[0,16]}})", good_data),
         {"'a'", "'shape'", "dimension 1"}},
        {"shape overflow",
         st_bytes(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,16]}})", good_data),
         {"'a'", "'shape'", "overflows"}},
        {"missing offsets", st_bytes(R"({"a":{"dtype":"F32","shape":[2,2]}})", good_data),
         {"'a'", "'data_offsets'", "missing"}},
        {"offsets wrong arity", st_bytes(R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0]}})", good_data),
         {"'a'", "'data_offsets'", "[begin, end]"}},
        {"offsets negative", st_bytes(R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[-4,12]}})", good_data),
         {"'a'", "'data_offsets'"}},
        {"offsets strings", st_bytes(R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":["0","16"]}})", good_data),
         {"'a'", "'data_offsets'"}},
        {"overlap",
         st_bytes(R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                  R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                  good_data),
         {"overlaps", "'a'", "'b'"}},
        {"duplicate name",
         st_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                  good_data),
         {"'a'", "twice"}},
        {"metadata not an object", st_bytes(ok_entry(R"(,"__metadata__":[1])"), good_data), {"__metadata__"}},
        {"metadata value not a string", st_bytes(ok_entry(R"(,"__metadata__":{"step":5})"), good_data),
         {"__metadata__", "'step'", "expected a string"}},
        {"invalid UTF-8 in header", st_bytes("{\"\xff\xfe\":{}}", ""), {"not valid JSON"}},
    };
    int i = 0;
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        std::string path = td.file(shardlm::cat("corrupt_", i++) + ".safetensors");
        write_bytes(path, c.bytes);
        try {
            SafetensorsReader r(path);
            ADD_FAILURE() << c.what << ": no error";
        } catch (const Error& e) {
            std::string msg = e.what();
            EXPECT_NE(msg.find(path), std::string::npos) << msg;
            for (const auto& n : c.needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
        }
    }
}

TEST(Safetensors, TruncatedDataAndMissingFile) {
    TempDir td;
    std::string path = td.file("trunc.safetensors");
    std::vector<float> v = ramp(100);
    SafetensorsWriter w;
    w.add_f32("v", {10, 10}, v.data());
    w.write(path);
    fs::resize_file(path, fs::file_size(path) - 1);
    expect_error([&] { SafetensorsReader r(path); }, {path, "'v'", "data_offsets", "beyond"});
    std::string none = td.file("does_not_exist.safetensors");
    expect_error([&] { SafetensorsReader r(none); }, {none, "cannot open"});
    expect_error([&] { SafetensorsReader r(td.dir.string()); }, {td.dir.string(), "not a regular file"});
}

TEST(Safetensors, WriterRejectsBadInput) {
    SafetensorsWriter w;
    float x[4] = {};
    w.add_f32("a", {2, 2}, x);
    expect_error([&] { w.add_f32("a", {1}, x); }, {"'a'", "twice"});
    expect_error([&] { w.add_f32("__metadata__", {1}, x); }, {"__metadata__", "reserved"});
    expect_error([&] { w.add_f32("", {1}, x); }, {"empty tensor name"});
    expect_error([&] { w.add_f32("neg", {-1, 2}, x); }, {"'neg'", "[-1, 2]"});
    expect_error([&] { w.add_raw("r", "I32", {3}, x, 8); }, {"'r'", "8 bytes", "needs 12"});
    expect_error([&] { w.add_raw("q", "Q4", {3}, x, 3); }, {"'q'", "Q4"});
    expect_error([&] { w.add_f32_ref("p", {3}, nullptr); }, {"'p'", "null"});
    // Failed adds leave nothing behind: the names are free and only 'a' is written.
    EXPECT_EQ(w.num_tensors(), 1u);
    w.add_raw("r", "I32", {2}, x, 8);
    w.add_f32_ref("p", {0}, nullptr);
    EXPECT_EQ(w.num_tensors(), 3u);
    TempDir td;
    std::string path = td.file("w.safetensors");
    w.write(path);
    SafetensorsReader r(path);
    EXPECT_EQ(r.tensors().size(), 3u);
    expect_error([&] { w.write(td.file("no_such_dir/x.safetensors")); }, {"no_such_dir"});
}

TEST(Safetensors, ReaderIsMovable) {
    static_assert(!std::is_copy_constructible_v<SafetensorsReader>);
    static_assert(std::is_nothrow_move_constructible_v<SafetensorsReader>);
    TempDir td;
    std::string p1 = td.file("1.safetensors"), p2 = td.file("2.safetensors");
    std::vector<float> a = {1, 2, 3}, b = {9};
    {
        SafetensorsWriter w;
        w.add_f32("a", {3}, a.data());
        w.write(p1);
    }
    {
        SafetensorsWriter w;
        w.add_f32("b", {1}, b.data());
        w.write(p2);
    }
    SafetensorsReader r1(p1);
    SafetensorsReader moved(std::move(r1));
    EXPECT_EQ(moved.path(), p1);
    EXPECT_EQ(moved.read_f32("a"), a);
    SafetensorsReader r2(p2);
    moved = std::move(r2);
    EXPECT_EQ(moved.path(), p2);
    EXPECT_EQ(moved.read_f32("b"), b);
    EXPECT_EQ(moved.find("a"), nullptr);
    std::vector<SafetensorsReader> v;
    v.emplace_back(p1);
    v.emplace_back(p2);
    EXPECT_EQ(v[0].read_f32("a"), a);
    EXPECT_EQ(v[1].read_f32("b"), b);
}
