#include "shardlm/model/gpt.h"

namespace shardlm::model {

namespace {
ModelPart::Options whole(int threads, int unit_multiple) {
    ModelPart::Options o;
    o.threads = threads;
    o.lanes = threads;  // the threads share each micro-batch by sequences (model/units.h)
    o.unit_multiple = unit_multiple;
    return o;
}
}  // namespace

Gpt::Gpt(GptConfig config, int B, int T, int threads, int unit_multiple)
    : part_(std::move(config), whole(threads, unit_multiple), B, T) {}

float Gpt::forward(const int* inputs, const int* targets, int B, int T, float dloss, UnitHooks* hooks) {
    const double sum = part_.forward(0, 0, inputs, targets, B, T, dloss, hooks);
    return targets ? float(sum / (double(B) * T)) : 0.0f;
}

}  // namespace shardlm::model
