// optim/optimizer.h: SGD, SGD with momentum, AdaGrad, Adam, AdamW, RAdam and Lion over the flat
// parameter buffer.
//
// The optimiser owns its state for a list of ranges of the flat buffer (the whole buffer in one
// process; this rank's shard of every unit under ZeRO), stored one after another, and walks the
// layout table to give each parameter's piece of a range its weight decay (none for biases and norm
// gains). Padding between parameters is skipped. Ranges ignore parameter boundaries: a parameter may
// straddle two ranks' shards, so each piece is found by intersection.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "shardlm/core/aligned_buffer.h"
#include "shardlm/core/enum_names.h"
#include "shardlm/model/layout.h"

namespace shardlm::optim {

enum class Kind { SGD, Momentum, AdaGrad, Adam, AdamW, RAdam, Lion };
inline constexpr EnumName<Kind> kKindNames[] = {{Kind::SGD, "sgd"},     {Kind::Momentum, "momentum"},
                                                {Kind::AdaGrad, "adagrad"}, {Kind::Adam, "adam"},
                                                {Kind::AdamW, "adamw"}, {Kind::RAdam, "radam"},
                                                {Kind::Lion, "lion"}};
constexpr const auto& enum_names(Kind) { return kKindNames; }
Kind parse_kind(const std::string& name);  // one of the names above, or a clear error
std::string kind_name(Kind k);

struct OptimConfig {
    Kind kind = Kind::AdamW;
    float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;  // Adam, AdamW, RAdam; Lion's betas (no eps)
    float momentum = 0.9f;                           // Momentum
    float adagrad_eps = 1e-10f;                      // AdaGrad (PyTorch's default)
    float weight_decay = 0.0f;                       // on 2-D tensors only
};

struct Range {
    size_t begin = 0, end = 0;
    size_t size() const { return end - begin; }
};

class Optimizer {
public:
    // State for the ranges `owned` (flat-buffer coordinates, ascending) of a buffer laid out by `layout`.
    Optimizer(OptimConfig cfg, const model::Layout& layout, std::vector<Range> owned);
    Optimizer(OptimConfig cfg, const model::Layout& layout, Range owned)
        : Optimizer(cfg, layout, std::vector<Range>{owned}) {}

    // One update from grad_scale * gradients (grad_scale applies clipping without a separate pass).
    // params[k], grads[k]: where range k is stored (owned()[k].size() floats each).
    void step(const std::vector<float*>& params, const std::vector<const float*>& grads, float lr,
              float grad_scale = 1.0f);
    // Same, with every range stored at its own offset of full flat buffers.
    void step(float* params, const float* grads, float lr, float grad_scale = 1.0f);

    const OptimConfig& config() const { return cfg_; }
    int steps_done() const { return step_; }
    void set_steps_done(int s) { step_ = s; }
    const std::vector<Range>& owned() const { return owned_; }
    size_t owned_elems() const { return owned_elems_; }
    // Named state buffers over the owned ranges, concatenated, one fp32 value per owned element
    // ("exp_avg", "exp_avg_sq", "momentum_buffer", "sum"): checkpoints save them per HF piece.
    std::vector<std::pair<std::string, AlignedBuffer<float>*>> state();
    size_t state_bytes() const;
    // Optimiser-state bytes per parameter this kind keeps (the planner's and the memory check's k).
    static double state_bytes_per_param(const OptimConfig& cfg);

private:
    OptimConfig cfg_;
    const model::Layout& layout_;
    std::vector<Range> owned_;
    size_t owned_elems_ = 0;
    AlignedBuffer<float> s0_, s1_;
    int step_ = 0;
};

// LR schedules: constant, or linear warm-up over `warmup` steps then cosine decay to `lr_min` at `total`.
enum class LrKind { Constant, Cosine };
inline constexpr EnumName<LrKind> kLrKindNames[] = {{LrKind::Constant, "constant"}, {LrKind::Cosine, "cosine"}};
constexpr const auto& enum_names(LrKind) { return kLrKindNames; }
struct LrSchedule {
    LrKind kind = LrKind::Constant;
    float lr = 1e-3f, lr_min = 0.0f;
    int warmup = 0, total = 1;
    float at(int step) const;
};

}  // namespace shardlm::optim
