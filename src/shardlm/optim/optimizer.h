// optim/optimizer.h: SGD, SGD with momentum, AdaGrad, Adam, AdamW, RAdam, Lion, 8-bit AdamW,
// Adafactor and Sophia-G over the flat parameter buffer.
//
// The optimiser owns its state for a list of ranges of the flat buffer (the whole buffer in one
// process; this rank's shard of every unit under ZeRO), stored one after another, and walks the
// layout table to give each parameter's piece of a range its weight decay (none for biases and norm
// gains). Padding between parameters is skipped. Ranges ignore parameter boundaries: a parameter may
// straddle two ranks' shards, so each piece is found by intersection.
//
// 8-bit AdamW (adam8bit) keeps m and v as 8-bit codes with one fp32 absmax per block of `block`
// elements of each parameter (counted from the parameter's first element); a piece of a parameter
// (a ZeRO slice boundary inside a block) quantises its part of the block as a block of its own.
// Parameters of fewer than kSmallTensor elements (of the whole tensor) keep fp32 m and v.
//
// Adafactor factors the second moment of each matrix into row and column statistics, which are sums
// over the whole matrix: every rank keeps them whole, and under ZeRO (a rank owns slices) its partial
// sums are summed over the ranks that share the model by the callback set_shard_sum() (the data-
// parallel layer's all-reduce; optim/ does not know the communicator). So are the sums of squares
// behind the RMS of the parameters and of the update. Tensor parallelism is refused (a rank would hold
// a shard of a matrix; train/train_config.cpp).
//
// Sophia keeps m and the diagonal Hessian estimate h, elementwise like Adam's m and v (so ZeRO shards
// them for free). h is refreshed by update_hessian() from the gradient of the loss on labels sampled
// from the model (the Gauss-Newton-Bartlett estimator), which the trainer computes every
// hess_interval steps (train/trainer.cpp); step() itself never touches h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "shardlm/core/aligned_buffer.h"
#include "shardlm/core/enum_names.h"
#include "shardlm/kernels/optimizer_kernels.h"
#include "shardlm/model/layout.h"

namespace shardlm::optim {

enum class Kind { SGD, Momentum, AdaGrad, Adam, AdamW, RAdam, Lion, Adam8bit, Adafactor, Sophia };
inline constexpr EnumName<Kind> kKindNames[] = {
    {Kind::SGD, "sgd"},     {Kind::Momentum, "momentum"}, {Kind::AdaGrad, "adagrad"},  {Kind::Adam, "adam"},
    {Kind::AdamW, "adamw"}, {Kind::RAdam, "radam"},       {Kind::Lion, "lion"},        {Kind::Adam8bit, "adam8bit"},
    {Kind::Adafactor, "adafactor"}, {Kind::Sophia, "sophia"}};
constexpr const auto& enum_names(Kind) { return kKindNames; }
Kind parse_kind(const std::string& name);  // one of the names above, or a clear error
std::string kind_name(Kind k);

// The 8-bit code of adam8bit's states (kernels/optimizer_kernels.h).
enum class QuantCode { Dynamic, Linear };
inline constexpr EnumName<QuantCode> kQuantCodeNames[] = {{QuantCode::Dynamic, "dynamic"}, {QuantCode::Linear, "linear"}};
constexpr const auto& enum_names(QuantCode) { return kQuantCodeNames; }
inline constexpr size_t kSmallTensor = 4096;  // adam8bit: smaller tensors keep fp32 state

struct OptimConfig {
    Kind kind = Kind::AdamW;
    float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;  // Adam, AdamW, RAdam, adam8bit; Lion's, Sophia's betas (no eps);
                                                     // Adafactor's beta1 and eps1 (transformers': 1e-30)
    float momentum = 0.9f;                           // Momentum
    float adagrad_eps = 1e-10f;                      // AdaGrad (PyTorch's default)
    float weight_decay = 0.0f;                       // on 2-D tensors only
    int block = 2048;                                // adam8bit: elements per quantisation block
    QuantCode code = QuantCode::Dynamic;             // adam8bit
    // Adafactor (transformers' names; eps1 is `eps`): a first moment with beta1 only if first_moment; the second
    // moment's decay beta2_t = 1 - t^decay_rate; the update divided by max(1, RMS(u) / clip_threshold)
    // (0: off); relative_step: min(1e-2, 1/sqrt(t)) instead of lr; scale_parameter: times max(eps2, RMS(p)).
    bool first_moment = true;
    float clip_threshold = 1.0f, decay_rate = -0.8f;
    bool relative_step = false, scale_parameter = false;
    static constexpr float kAdafactorEps2 = 1e-3f;
    // Sophia: the clip's rho, the tokens B of each Hessian estimate (the step's G x T), and how often
    // the trainer refreshes the estimate
    float rho = 0.04f;
    double hess_batch = 1;
    int hess_interval = 10;
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

    // The 16-bit copy of the parameters a mixed-precision model reads: where range k's copy is stored
    // (ranges[k], owned()[k].size() elements of `type`, BF16 or F16).
    struct Mirror {
        std::vector<void*> ranges;
        DType type;
    };
    // One update from grad_scale * gradients (grad_scale applies clipping without a separate pass).
    // params[k], grads[k]: where range k is stored (owned()[k].size() floats each). mirror: also write
    // the updated parameters rounded into it, in the update's own pass, where the optimiser can (Adam,
    // AdamW): returns whether it did (else the caller rounds them itself).
    bool step(const std::vector<float*>& params, const std::vector<const float*>& grads, float lr,
              float grad_scale = 1.0f, const Mirror* mirror = nullptr);
    // Same, with every range stored at its own offset of full flat buffers.
    void step(float* params, const float* grads, float lr, float grad_scale = 1.0f);

    // Sophia: h <- beta2 h + (1 - beta2) (grad_scale g)^2 from gradients of the loss on sampled labels
    // (same storage as step()'s).
    void update_hessian(const std::vector<const float*>& grads, float grad_scale = 1.0f);
    void update_hessian(const float* grads, float grad_scale = 1.0f);
    bool needs_hessian() const { return cfg_.kind == Kind::Sophia; }
    // Whether the trainer refreshes the Hessian estimate after optimiser step `step` (0-based): every
    // hess_interval steps, at steps k-1, 2k-1, ... (the authors' iter_num % k == k - 1).
    bool hessian_due(int step) const { return needs_hessian() && (step + 1) % cfg_.hess_interval == 0; }

    // Sums a vector over the ranks whose owned ranges together make the whole layout (ZeRO's
    // data-parallel group), in place; unset: this rank owns everything. Adafactor needs it. experts (set
    // under expert parallelism): the same over the ranks holding the same experts, for the entries of the
    // Experts units' parameters (other ranks of the data-parallel group hold other experts at those places).
    void set_shard_sum(std::function<void(double*, size_t)> f, std::function<void(double*, size_t)> experts = {}) {
        shard_sum_ = std::move(f), expert_sum_ = std::move(experts);
    }

    const OptimConfig& config() const { return cfg_; }
    int steps_done() const { return step_; }
    void set_steps_done(int s) { step_ = s; }
    const std::vector<Range>& owned() const { return owned_; }
    size_t owned_elems() const { return owned_elems_; }
    // Named state buffers over the owned ranges, concatenated, one fp32 value per owned element
    // ("exp_avg", "exp_avg_sq", "momentum_buffer", "sum", "hessian"): checkpoints save them per HF piece.
    // adam8bit's are views, dequantised here, and so are Adafactor's second moments ("exp_avg_sq" of
    // vectors, "exp_avg_sq_row"/"exp_avg_sq_col": each element holds its row's / column's statistic):
    // after writing into them (a checkpoint's load), call state_loaded() to take them back (collective
    // for Adafactor under ZeRO: it sums over the shards); after reading them, release_state_views().
    // Calling state() again before the release refreshes the same views (pointers stay valid).
    std::vector<std::pair<std::string, AlignedBuffer<float>*>> state();
    void state_loaded();
    void release_state_views();
    // The bytes of state allocated (adam8bit: its codes, absmax and fp32 small tensors; Adafactor:
    // its statistics too; the checkpoint views not counted).
    size_t state_bytes() const;
    // Optimiser-state bytes per parameter this kind keeps (the planner's and the memory check's k).
    static double state_bytes_per_param(const OptimConfig& cfg);

private:
    // A parameter's part of an owned range: flat [begin, end), at `state` in the concatenated state.
    struct Piece {
        size_t range = 0, param = 0, begin = 0, end = 0, state = 0;
        // adam8bit: fp32 state at `f32` of s0_/s1_ (small tensors), or codes at `q` of q0_/q1_ in
        // blocks_[block, block + blocks) (absmax: a0_/a1_ at the same indices)
        bool small = false;
        size_t f32 = 0, q = 0, block = 0, blocks = 0;
    };
    // the constructor's parts: the pieces, and the state of the rules whose state is not elementwise fp32
    void cut_pieces();
    void allocate_8bit();
    void allocate_factored();
    // adam8bit: dequantise the state into view0_/view1_ (to_views), or quantise them back
    void move_8bit_state(bool to_views);
    // Adafactor: per parameter of the layout, its factored statistics at `rc` of rc_ (rows, then
    // columns; kept whole on every rank) and its slots at `stat` of stats_ (row and column sums, then
    // the sum of p^2)
    struct Factor {
        bool factored = false;
        bool expert = false;  // an Experts unit's (summed over the expert-data-parallel group)
        size_t rows = 1, cols = 1, real_rows = 1, real = 0, rc = 0, stat = 0;
    };
    void step_adafactor(const std::vector<float*>& params, const std::vector<const float*>& grads, float lr, float gs);
    void load_adafactor_state();
    // v (n entries, entry i of the parameter whose factor expert(i) tells) summed by shard_sum_ and expert_sum_
    template <class IsExpert>
    void sum_over_shards(double* v, size_t n, IsExpert expert) const;
    void step_adam8bit(const std::vector<float*>& params, const std::vector<const float*>& grads, float lr, float gs);
    // One of the other elementwise rules over every piece in one pass (params empty: the Hessian's, which has none)
    void run_rule(const kernels::RuleArgs& a, const std::vector<float*>& params, const std::vector<const float*>& grads);

    OptimConfig cfg_;
    const model::Layout& layout_;
    std::vector<Range> owned_;
    size_t owned_elems_ = 0;
    std::vector<Piece> pieces_;
    // adam8bit: the 8-bit blocks, flat [begin, end): the pieces' elements cut at their parameter's
    // block boundaries (multiples of cfg_.block from the parameter's first element)
    std::vector<Range> blocks_;
    AlignedBuffer<float> s0_, s1_;
    // adam8bit: codes, blocks' absmax, the code tables, scratch per thread, checkpoint views
    AlignedBuffer<uint8_t> q0_, q1_;
    AlignedBuffer<float> a0_, a1_, scratch_, view0_, view1_, view2_;
    std::optional<kernels::CodeIndex> code_m_, code_v_;
    // adafactor: the vectors' v (s1_ at Piece::f32), m in s0_, the whole matrices' statistics
    std::vector<Factor> factors_;
    AlignedBuffer<float> rc_, rf_;  // statistics; their rsqrt factors (scratch)
    std::vector<double> stats_, usq_;
    std::function<void(double*, size_t)> shard_sum_, expert_sum_;
    std::vector<char> stat_expert_, rc_expert_;  // whether an entry of stats_ / rc_ is an expert's
    std::vector<kernels::RuleSlice> rule_slices_;  // run_rule's, kept
    int step_ = 0;
};

// LR schedules: constant, or linear warm-up over `warmup` steps then a cosine or a linear decay to `lr_min` at
// `total` (linear: "Straight to Zero", Bergsma et al. 2025, decays to lr_min 0).
enum class LrKind { Constant, Cosine, Linear };
inline constexpr EnumName<LrKind> kLrKindNames[] = {
    {LrKind::Constant, "constant"}, {LrKind::Cosine, "cosine"}, {LrKind::Linear, "linear"}};
constexpr const auto& enum_names(LrKind) { return kLrKindNames; }
struct LrSchedule {
    LrKind kind = LrKind::Constant;
    float lr = 1e-3f, lr_min = 0.0f;
    int warmup = 0, total = 1;
    float at(int step) const;
};

}  // namespace shardlm::optim
