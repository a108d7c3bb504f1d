#include "shardlm/core/scratch.h"

#include "shardlm/core/aligned_buffer.h"

namespace shardlm {

float* thread_scratch(int slot, size_t n) {
    thread_local AlignedBuffer<float> bufs[8];
    AlignedBuffer<float>& b = bufs[slot];
    if (b.size() < n) b.resize(n);
    return b.data();
}

}  // namespace shardlm
