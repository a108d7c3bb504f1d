// libFuzzer target: the safetensors reader (io/safetensors.h) and the checkpoint piece index on top
// of it (model::PieceStore) on arbitrary bytes. Each input is accepted or refused with
// shardlm::Error; anything else (a crash, an out-of-bounds read that ASan sees, another exception,
// a hang) is a finding.
#include <cstdint>

#include "fuzz_input.h"
#include "shardlm/core/check.h"
#include "shardlm/io/safetensors.h"
#include "shardlm/model/weights.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = shardlm::fuzz::as_file(data, size);
    try {
        shardlm::io::SafetensorsReader r(path);
        for (const shardlm::io::TensorInfo& t : r.tensors()) {
            if (t.dtype == "F32" || t.dtype == "F16" || t.dtype == "BF16") (void)r.read_f32(t.name);
            if (t.dtype == "I32") (void)r.read_i32(t.name);
        }
        shardlm::model::PieceStore store;  // parses every tensor name as a piece of an HF tensor
        store.add_file(path);
    } catch (const shardlm::Error&) {
    }
    return 0;
}
