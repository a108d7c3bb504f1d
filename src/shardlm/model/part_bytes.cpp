// model/part_bytes.cpp: what a ModelPart's buffers take (the memory report's lines, train/reports.cpp): its
// slots, their keeps between a backward's two phases, the recomputation scratch and one block's activations.
#include "shardlm/model/part.h"

namespace shardlm::model {

size_t ModelPart::Slot::keep_bytes() const {
    size_t n = head_keep.bytes() + dx0.bytes();
    for (const auto& k : keeps) n += k.bytes();
    return n;
}

size_t ModelPart::Slot::bytes() const {
    size_t n = tokens.bytes() + head.bytes() + keep_bytes();
    for (const auto& b : x) n += b.bytes();
    for (const auto& b : blocks) n += b.bytes();
    return n;
}

size_t ModelPart::slot_bytes(int chunk) const { return chunks_[size_t(chunk)].slots.front().bytes(); }

size_t ModelPart::recompute_bytes() const { return recompute_acts_.bytes() + scratch_.recomputed.bytes() + scratch_.att.bytes() + scratch_.atty.bytes(); }

ModelPart::BlockBytes ModelPart::block_bytes() const {
    BlockBytes b;
    for (const Chunk& ch : chunks_) {
        const Slot& s = ch.slots.front();
        for (const ComputeUnit& u : ch.compute) {
            if (u.kind != ComputeUnit::Kind::Block) continue;
            b.values = (long long)s.x[size_t(u.in)].bytes();  // the block's input
            if (!s.blocks.empty()) {
                const BlockActs& a = s.blocks[size_t(u.block)];
                b.stats = (long long)a.stats_bytes();
                b.values += (long long)(a.bytes() - a.stats_bytes());
            }
            return b;
        }
    }
    return b;
}

size_t ModelPart::keep_bytes() const {
    size_t n = keep_.bytes() + head_keep_.bytes();
    for (const Chunk& ch : chunks_)
        for (const Slot& s : ch.slots) n += s.keep_bytes();
    return n;
}

size_t ModelPart::activation_bytes() const {
    size_t n = scratch_.bytes() + vec_.bytes() + recompute_acts_.bytes() + keep_.bytes() + head_keep_.bytes();
    for (const Chunk& ch : chunks_) {
        n += ch.dres.bytes();
        for (const Slot& s : ch.slots) n += s.bytes();
    }
    return n;
}

}  // namespace shardlm::model
