// model/part_bytes.cpp: what a ModelPart's buffers take (the memory report's lines, train/reports.cpp): its
// slots, their keeps between a backward's two phases, the recomputation scratch and one block's activations.
#include "shardlm/model/part.h"

namespace shardlm::model {

size_t ModelPart::slot_bytes(int chunk) const {
    const Chunk& ch = chunks_[size_t(chunk)];
    size_t n = ch.slots.front().bytes();
    for (const auto& u : ch.compute) n += u->bytes(0).total();
    return n;
}

size_t ModelPart::recompute_bytes() const {
    return shared_.recompute.bytes() + scratch_.recomputed.bytes() + scratch_.att.bytes() + scratch_.atty.bytes();
}

ModelPart::BlockBytes ModelPart::block_bytes() const {
    for (const Chunk& ch : chunks_)
        for (const auto& u : ch.compute) {
            if (u->kind() != ComputeUnit::Kind::Block) continue;
            const SlotBytes a = u->bytes(0);
            BlockBytes b;
            b.values = (long long)(ch.slots.front().x[size_t(u->in())].bytes() + a.values);  // with the block's input
            b.stats = (long long)a.stats;
            return b;
        }
    return {};
}

size_t ModelPart::keep_bytes() const {
    size_t n = shared_.keep.bytes() + shared_.head_keep.bytes();
    for (const Chunk& ch : chunks_)
        for (size_t s = 0; s < ch.slots.size(); s++)
            for (const auto& u : ch.compute) n += u->bytes(int(s)).keep;
    return n;
}

CpBytes ModelPart::cp_bytes() const {
    if (!split_) return {};
    const BlockDims d = block_dims(config_, ctx_.tp_size());
    int blocks = 0;
    for (const Chunk& ch : chunks_) blocks += ch.blocks;
    const size_t block_elems = size_t(maxB_) * size_t(maxT_) * 2 * size_t(d.KVt) * size_t(d.HS);
    CpBytes b = cp_attention_bytes(ctx_.cp_comm, split_->cp(), block_elems, ctx_.prec.activation);
    if (ctx_.recompute == Recompute::Full) b.kv_forward *= 2;  // the block's forward again before its backward
    b *= size_t(blocks);
    return b;
}

size_t ModelPart::activation_bytes() const {
    size_t n = scratch_.bytes() + params_->widened_bytes() + shared_.recompute.bytes() + shared_.keep.bytes() +
               shared_.head_keep.bytes();
    for (const Chunk& ch : chunks_) {
        n += ch.dres.bytes();
        for (size_t s = 0; s < ch.slots.size(); s++) {
            n += ch.slots[s].bytes();
            for (const auto& u : ch.compute) n += u->bytes(int(s)).total();
        }
    }
    return n;
}

}  // namespace shardlm::model
