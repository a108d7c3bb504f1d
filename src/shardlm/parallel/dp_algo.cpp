#include "shardlm/parallel/dp_algo.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "shardlm/core/check.h"
#include "shardlm/kernels/optimizer_kernels.h"
#include "shardlm/kernels/sample_labels.h"

namespace shardlm::parallel {

// ---- topologies ---------------------------------------------------------------------------------

int torus_rows(int n) {
    int r = 1;
    for (int d = 1; d * d <= n; d++)
        if (n % d == 0) r = d;
    return r;
}

namespace {

std::vector<int> neighbours(Topology t, int n, int i) {
    std::vector<int> nb;
    auto add = [&](int j) {
        j = ((j % n) + n) % n;
        if (j != i && std::find(nb.begin(), nb.end(), j) == nb.end()) nb.push_back(j);
    };
    switch (t) {
        case Topology::Ring: add(i + 1), add(i - 1); break;
        case Topology::Torus: {
            const int r = torus_rows(n), c = n / r, row = i / c, col = i % c;
            auto at = [&](int rr, int cc) { return ((rr + r) % r) * c + (cc + c) % c; };
            add(at(row + 1, col)), add(at(row - 1, col)), add(at(row, col + 1)), add(at(row, col - 1));
            break;
        }
        case Topology::Exp:
            for (int k = 1; k < n; k *= 2) add(i + k), add(i - k);
            break;
        case Topology::OnePeerExp: break;  // gossip_mixing
    }
    std::sort(nb.begin(), nb.end());
    return nb;
}

int ceil_log2(int n) {
    int k = 0;
    while ((1 << k) < n) k++;
    return k;
}

}  // namespace

Mixing gossip_mixing(Topology t, int n, int rank, int step) {
    Mixing m;
    if (n <= 1) return m;
    if (t == Topology::OnePeerExp) {
        const int k = 1 << (step % ceil_log2(n));
        if ((n & (n - 1)) == 0) {  // a power of two: the hypercube's pairs, symmetric
            const int peer = rank ^ k;
            m.send_to = {peer}, m.recv_from = {peer};
        } else {
            m.send_to = {(rank + k) % n}, m.recv_from = {(rank - k + n) % n};
        }
        m.w_recv = {0.5};
        m.w_self = 0.5;
        return m;
    }
    // Metropolis-Hastings on the undirected graph
    const std::vector<int> nb = neighbours(t, n, rank);
    const double di = double(nb.size());
    double sum = 0;
    for (int j : nb) {
        const double w = 1.0 / (1.0 + std::max(di, double(neighbours(t, n, j).size())));
        m.recv_from.push_back(j), m.w_recv.push_back(w);
        sum += w;
    }
    m.send_to = nb;
    m.w_self = 1.0 - sum;
    return m;
}

std::vector<double> mixing_matrix(Topology t, int n, int step) {
    std::vector<double> w(size_t(n) * size_t(n), 0.0);
    for (int i = 0; i < n; i++) {
        const Mixing m = gossip_mixing(t, n, i, step);
        w[size_t(i) * n + size_t(i)] = m.w_self;
        for (size_t j = 0; j < m.recv_from.size(); j++) w[size_t(i) * n + size_t(m.recv_from[j])] += m.w_recv[j];
    }
    return w;
}

// ---- the algorithms -----------------------------------------------------------------------------

void average(comm::Group& g, float* x, size_t n) {
    g.all_reduce_sum(x, n);
    const float inv = 1.0f / float(g.size());
    for (size_t i = 0; i < n; i++) x[i] *= inv;
}

void gossip_round(comm::Group& g, Topology t, int step, float* x, size_t n, std::vector<AlignedBuffer<float>>& recv) {
    constexpr int kTag = 23001;
    const Mixing m = gossip_mixing(t, g.size(), g.rank(), step);
    recv.resize(m.recv_from.size());
    std::vector<comm::Request> pending;
    for (size_t j = 0; j < m.recv_from.size(); j++) {
        if (recv[j].size() != n) recv[j].resize(n);
        pending.push_back(g.irecv(recv[j].data(), n * sizeof(float), m.recv_from[j], kTag));
    }
    for (int dst : m.send_to) pending.push_back(g.isend(x, n * sizeof(float), dst, kTag));
    for (auto& r : pending) r.wait();  // the sends read x: mixed into only after they completed
    const float ws = float(m.w_self);
    for (size_t i = 0; i < n; i++) {
        float v = ws * x[i];
        for (size_t j = 0; j < recv.size(); j++) v += float(m.w_recv[j]) * recv[j].data()[i];
        x[i] = v;
    }
}

size_t average_optimizer(comm::Group& g, optim::Optimizer& opt) {
    size_t n = 0;
    for (auto& [name, buf] : opt.state()) average(g, buf->data(), buf->size()), n += buf->size();
    opt.state_loaded();  // adam8bit: requantised from the averaged views
    return n;
}

namespace {

size_t all_reduce_bytes(const comm::Group& g, size_t n, size_t elem) {
    return comm::ring_bytes_rank(comm::OpKind::AllReduce, n, elem, g.size(), g.rank());
}

// x (n floats) <- its sum over the group, sent as `wire` (F32, or 16 bits in `scratch`: every hop adds in
// fp32 and rounds)
void all_reduce_sum_as(comm::Group& g, float* x, size_t n, DType wire, std::vector<unsigned short>& scratch) {
    if (wire == DType::F32) return g.all_reduce_sum(x, n);
    if (scratch.size() < n) scratch.resize(n);
    convert_from_f32(scratch.data(), wire, x, n);
    g.all_reduce_sum(scratch.data(), n, wire);
    convert_to_f32(x, scratch.data(), wire, n);
}


class AllReduceAlgo final : public DpAlgorithm {
public:
    using DpAlgorithm::DpAlgorithm;
    size_t expected_bytes(int) const override { return std::numeric_limits<size_t>::max(); }
};

// Local SGD (FedAvg): every H steps the replicas' parameters (and with --average-optimizer the
// optimiser's state) are averaged.
class LocalSgd final : public DpAlgorithm {
public:
    using DpAlgorithm::DpAlgorithm;
    bool due(int step) const { return (step + 1) % cfg_.local_steps == 0; }
    void after_step(float* params, optim::Optimizer& opt, int step) override {
        if (!due(step)) return;
        average(dp_, params, n_);
        if (cfg_.average_optimizer) opt_elems_ = average_optimizer(dp_, opt);
    }
    size_t expected_bytes(int step) const override {
        if (!due(step)) return 0;
        return all_reduce_bytes(dp_, n_, 4) + (cfg_.average_optimizer ? all_reduce_bytes(dp_, opt_elems_, 4) : 0);
    }
    std::string formula() const override {
        return "every H steps 2(N-1)/N x 4 P bytes (the parameters" +
               std::string(cfg_.average_optimizer ? " and the optimiser state)" : ")");
    }

private:
    size_t opt_elems_ = 0;
};

// DiLoCo (Douillard et al. 2023): every H inner steps the outer gradient delta = anchor - x_i is
// averaged over the replicas (fp32 or bf16 on the wire), the outer SGD with Nesterov momentum steps
// the anchor (torch.optim.SGD(nesterov=True): v = mu v + delta; anchor -= lr (delta + mu v)), and every
// replica restarts from it. The inner optimiser's state stays local (or averaged with --average-optimizer).
class Diloco final : public DpAlgorithm {
public:
    Diloco(const DpAlgoConfig& cfg, comm::Group& dp, const model::Layout& layout) : DpAlgorithm(cfg, dp, layout) {
        anchor_.resize(n_), momentum_.resize(n_), delta_.resize(n_);
        momentum_.zero();
    }
    void start(const float* params) override { std::memcpy(anchor_.data(), params, n_ * sizeof(float)); }
    bool due(int step) const { return (step + 1) % cfg_.local_steps == 0; }
    void after_step(float* params, optim::Optimizer& opt, int step) override {
        if (!due(step)) return;
        float* d = delta_.data();
        for (size_t i = 0; i < n_; i++) d[i] = anchor_.data()[i] - params[i];
        all_reduce_sum_as(dp_, d, n_, cfg_.outer_dtype, wire_);
        const float inv = 1.0f / float(dp_.size()), mu = cfg_.outer_momentum, lr = cfg_.outer_lr;
        float *a = anchor_.data(), *v = momentum_.data();
        for (size_t i = 0; i < n_; i++) {
            const float g = d[i] * inv;
            v[i] = mu * v[i] + g;
            a[i] -= lr * (g + mu * v[i]);
        }
        std::memcpy(params, a, n_ * sizeof(float));
        if (cfg_.average_optimizer) opt_elems_ = average_optimizer(dp_, opt);
    }
    std::vector<StateBuffer> state() override { return {{"diloco_anchor", &anchor_}, {"diloco_momentum", &momentum_}}; }
    size_t expected_bytes(int step) const override {
        if (!due(step)) return 0;
        return all_reduce_bytes(dp_, n_, dtype_bytes(cfg_.outer_dtype)) +
               (cfg_.average_optimizer ? all_reduce_bytes(dp_, opt_elems_, 4) : 0);
    }
    std::string formula() const override {
        return "every H steps 2(N-1)/N x " + std::to_string(dtype_bytes(cfg_.outer_dtype)) + " P bytes (the outer delta" +
               (cfg_.average_optimizer ? "; and 2(N-1)/N x 4 bytes of optimiser state)" : ")");
    }

private:
    AlignedBuffer<float> anchor_, momentum_, delta_;
    std::vector<unsigned short> wire_;  // the delta in 16 bits (--outer-dtype)
    size_t opt_elems_ = 0;
};

// D-PSGD (Lian et al. 2017): after each local step x_i <- W_ii x_i + sum_j W_ij x_j over the
// topology's neighbours (point-to-point: the whole replica to each neighbour); every K steps
// (--global-avg-every, Chen et al. 2021) a global average instead.
class Gossip final : public DpAlgorithm {
public:
    using DpAlgorithm::DpAlgorithm;
    bool global(int step) const { return cfg_.global_avg_every > 0 && (step + 1) % cfg_.global_avg_every == 0; }
    void after_step(float* params, optim::Optimizer&, int step) override {
        if (dp_.size() == 1) return;
        if (global(step)) return average(dp_, params, n_);
        gossip_round(dp_, cfg_.topology, step, params, n_, recv_);
    }
    size_t expected_bytes(int step) const override {
        if (dp_.size() == 1) return 0;
        if (global(step)) return all_reduce_bytes(dp_, n_, 4);
        return gossip_mixing(cfg_.topology, dp_.size(), dp_.rank(), step).send_to.size() * n_ * sizeof(float);
    }
    std::string formula() const override {
        return "every step d x 4 P bytes (the replica to each of d neighbours)" +
               std::string(cfg_.global_avg_every > 0 ? "; every K steps 2(N-1)/N x 4 P instead" : "");
    }

private:
    std::vector<AlignedBuffer<float>> recv_;
};

// A tensor's key for the compressors' randomness: its HF name, so that every copy of a tensor (a
// tensor-parallel replica of a LayerNorm, the last pipeline stage's tied copy of wte) draws alike.
uint64_t name_key(const std::string& name) {
    uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
    for (unsigned char ch : name) h = (h ^ ch) * 0x100000001b3ULL;
    return h;
}

// The parameters with a row per token: the token embedding (and the head's tied copy of it), an untied LM head.
std::vector<bool> vocabulary_params(const model::Layout& layout) {
    std::vector<bool> v(layout.params.size(), false);
    for (const model::Unit& u : layout.units) {
        if (u.kind == model::UnitKind::TokenEmbedding)
            for (int i = u.first_param; i < u.first_param + u.num_params; i++) v[size_t(i)] = true;
        if (u.kind == model::UnitKind::Head && u.role[model::kLmHead] >= 0) v[size_t(u.role[model::kLmHead])] = true;
    }
    return v;
}

// Compressed gradients (seed 002, part 04): each rank sends C(p) instead of its gradient, p = g
// (none), g + e with e <- p - C(p) (ef: Seide et al. 2014, Karimireddy et al. 2019), or, with ef21
// (Richtarik et al. 2021), C(g - g_i) with g_i <- g_i + C(g - g_i) and the aggregate estimate
// g_agg <- g_agg + mean_r C_r (every rank holds the same g_agg, and that is the gradient used).
// Elementwise compressors work tensor by tensor (layer-wise top-k, QSGD buckets and sign scales within
// a tensor): a tensor that is the same on two ranks of a replica (a LayerNorm under tensor
// parallelism, the tied embedding's two pipeline copies) is then compressed the same and its copies
// stay equal. The tensors' messages are concatenated (one size per rank), all-gathered, and every
// rank sums the decoded messages in rank order (the same bits everywhere). PowerSGD's factors are
// all-reduced (its vectors uncompressed; --compress-dtype: in 16 bits on the wire). The vocabulary's
// matrices (--compress-embedding) may take a compressor of their own: another elementwise one, or another
// PowerSGD rank (none: sent whole, as the vectors). With top-k, --momentum-correction m is Deep Gradient
// Compression's (Lin et al. 2018): each rank's own momentum u <- m u + g takes g's place in p = u + e, and
// an element the rank sent leaves u as it leaves e (momentum factor masking); the optimiser then runs
// without a momentum of its own (--beta1 0).
class Compressed final : public DpAlgorithm {
public:
    Compressed(const DpAlgoConfig& cfg, comm::Group& dp, const model::Layout& layout) : DpAlgorithm(cfg, dp, layout) {
        const CompressSpec& c = cfg_.compress;
        if (cfg_.error_feedback != ErrorFeedback::None) err_.resize(n_), err_.zero();
        if (cfg_.error_feedback == ErrorFeedback::Ef21) agg_.resize(n_), agg_.zero();
        if (cfg_.momentum_correction > 0) mom_.resize(n_), mom_.zero();
        work_.resize(n_);
        const std::vector<bool> vocab = vocabulary_params(layout);
        auto spec_of = [&](size_t i) -> const CompressSpec& {
            return vocab[i] && cfg_.compress_embedding ? *cfg_.compress_embedding : c;
        };
        if (c.kind == CompressKind::PowerSgd) {
            std::vector<PowerSgdMatrix> mats;
            for (size_t i = 0; i < layout.params.size(); i++) {
                const model::ParamSpec& p = layout.params[i];
                if (p.shape.size() >= 2 && spec_of(i).kind == CompressKind::PowerSgd)
                    mats.push_back({p.offset, size_t(p.shape[0]), p.numel / size_t(p.shape[0]), name_key(p.name),
                                    spec_of(i).rank});
                else
                    vectors_.push_back({p.offset, p.numel});
            }
            power_ = std::make_unique<PowerSgd>(c.rank, std::move(mats), n_, cfg_.seed);
            return;
        }
        size_t at = 0;
        for (size_t i = 0; i < layout.params.size(); i++) {
            const model::ParamSpec& p = layout.params[i];
            if (p.numel == 0) continue;
            const CompressSpec& pc = spec_of(i);
            tensors_.push_back({p.offset, p.numel, at, message_bytes(pc, p.numel), name_key(p.name), pc});
            at += tensors_.back().bytes;
        }
        msg_.resize(at);
        all_.resize(at * size_t(dp_.size()));
        cx_.resize(n_);
    }
    void reduce_gradients(float* g, int step, float scale) override {
        const ErrorFeedback ef = cfg_.error_feedback;
        float *p = work_.data(), *e = err_.data();
        // p: what is compressed, in the gradient's own units (the buffers outlive a change of loss scale)
        const float inv = 1.0f / scale;
        const float mc = cfg_.momentum_correction;
        float* u = mom_.data();  // DGC: this rank's momentum, in the gradient's units
        for (size_t i = 0; i < n_; i++) {
            float gi = g[i] * inv;
            if (mc > 0) gi = u[i] = mc * u[i] + gi;
            p[i] = ef == ErrorFeedback::None ? gi : ef == ErrorFeedback::Ef21 ? gi - e[i] : gi + e[i];
        }
        if (power_) {
            // out: the aggregate P^ Q^T (the rank-mean elsewhere); error feedback e = p - out
            calls_.clear();
            power_->reduce(p, g, dp_.size(), [this](float* x, size_t k) {
                calls_.push_back(k);
                all_reduce_sum_as(dp_, x, k, cfg_.compress_dtype, wire_);  // the error feedback carries the rounding
            });
            if (ef == ErrorFeedback::Ef) {
                for (size_t i = 0; i < n_; i++) e[i] = p[i] - g[i];
                // the vectors went uncompressed (averaged exactly): no error of theirs to carry, or each
                // rank's buffer would add up its own deviation from the mean, step after step
                for (auto [b, n] : vectors_) std::fill_n(e + b, n, 0.0f);
            }
            if (scale != 1.0f)
                for (size_t i = 0; i < n_; i++) g[i] *= scale;
            return;
        }
        const int N = dp_.size(), me = dp_.rank();
        const uint64_t step_seed = kernels::label_sample_seed(cfg_.seed, step);
        seeds_.resize(size_t(N));
        float* cx = cx_.data();  // C(p), decoded
        for (const Tensor& t : tensors_)
            compress(t.spec, p + t.offset, t.numel, seed(t.spec, step_seed, t.key, me), msg_.data() + t.msg, cx + t.offset);
        for (const Tensor& t : tensors_)
            for (size_t i = t.offset; i < t.offset + t.numel; i++) {
                if (ef == ErrorFeedback::Ef) e[i] = p[i] - cx[i];
                if (mc > 0 && cx[i] != 0.0f) u[i] = 0.0f;  // DGC's masking: what this rank sent leaves its momentum too
                if (ef == ErrorFeedback::Ef21) e[i] += cx[i];  // g_i <- g_i + C(g - g_i)
            }
        dp_.all_gather_bytes(msg_.data(), all_.data(), msg_.size());
        for (const Tensor& t : tensors_) {
            one_.resize(t.bytes * size_t(N));  // the ranks' messages of this tensor, rank-major
            for (int r = 0; r < N; r++) {
                std::memcpy(one_.data() + size_t(r) * t.bytes, all_.data() + size_t(r) * msg_.size() + t.msg, t.bytes);
                seeds_[size_t(r)] = seed(t.spec, step_seed, t.key, r);
            }
            aggregate(t.spec, one_.data(), N, t.numel, seeds_.data(), g + t.offset);
        }
        if (ef == ErrorFeedback::Ef21) {
            float* a = agg_.data();
            for (const Tensor& t : tensors_)
                for (size_t i = t.offset; i < t.offset + t.numel; i++) a[i] += g[i], g[i] = a[i];
        }
        if (scale != 1.0f)  // back in the loss scale's units, as the rest of the step reads gradients
            for (const Tensor& t : tensors_)
                for (size_t i = t.offset; i < t.offset + t.numel; i++) g[i] *= scale;
    }
    std::vector<StateBuffer> state() override {
        std::vector<StateBuffer> s;
        if (err_.size()) s.push_back({cfg_.error_feedback == ErrorFeedback::Ef21 ? "ef21_local" : "ef_error", &err_});
        if (agg_.size()) s.push_back({"ef21_aggregate", &agg_});
        if (mom_.size()) s.push_back({"dgc_momentum", &mom_});
        if (power_) {
            q_.resize(power_->q_state().size());
            std::copy(power_->q_state().begin(), power_->q_state().end(), q_.data());
            s.push_back({"powersgd_q", &q_});
        }
        return s;
    }
    void state_loaded() override {
        if (power_) std::copy(q_.data(), q_.data() + q_.size(), power_->q_state().begin());
    }
    size_t expected_bytes(int) const override {
        if (dp_.size() == 1) return 0;
        if (!power_)
            return comm::ring_bytes_rank(comm::OpKind::AllGather, msg_.size() * size_t(dp_.size()), 1, dp_.size(),
                                                dp_.rank());
        size_t b = 0;
        for (size_t k : calls_) b += all_reduce_bytes(dp_, k, dtype_bytes(cfg_.compress_dtype));
        return b;
    }
    std::string formula() const override {
        const std::string emb = cfg_.compress_embedding ? "; the vocabulary's matrices " +
                                                              compress_text(*cfg_.compress_embedding) : "";
        if (power_)
            return "2(N-1)/N x " + std::to_string(dtype_bytes(cfg_.compress_dtype)) +
                   " (P + Q factors + uncompressed vectors) bytes, all-reduced" + emb;
        return "(N-1) x " + std::to_string(msg_.size()) + " bytes (each rank's " + compress_text(cfg_.compress) +
               " messages of its tensors" + emb + ", all-gathered)";
    }

private:
    struct Tensor {
        size_t offset, numel, msg, bytes;  // flat elements; its message at msg of the rank's message
        uint64_t key;
        CompressSpec spec;                 // --compress, or --compress-embedding for the vocabulary's
    };
    // rand-k's indices must agree across ranks (the same seed for every rank), QSGD's rounding not
    static uint64_t seed(const CompressSpec& spec, uint64_t step_seed, uint64_t key, int r) {
        const uint64_t s = kernels::mix64(step_seed ^ key);
        return spec.kind == CompressKind::RandK ? s : kernels::mix64(s + uint64_t(r) + 1);
    }
    AlignedBuffer<float> err_, agg_, mom_, work_, cx_, q_;
    std::vector<unsigned short> wire_;  // PowerSGD's round in 16 bits (--compress-dtype)
    std::vector<Tensor> tensors_;
    std::vector<unsigned char> msg_, all_, one_;  // this rank's message, every rank's, one tensor's (scratch)
    std::vector<uint64_t> seeds_;                  // one tensor's seed per rank (scratch)
    std::unique_ptr<PowerSgd> power_;
    std::vector<std::pair<size_t, size_t>> vectors_;  // PowerSGD: the 1-D tensors (offset, elements), uncompressed
    std::vector<size_t> calls_;
};

}  // namespace

size_t DpAlgorithm::expected_bytes(int) const { return std::numeric_limits<size_t>::max(); }
std::string DpAlgorithm::formula() const { return "the ZeRO stage's reductions"; }

}  // namespace shardlm::parallel

namespace shardlm::parallel {

std::unique_ptr<DpAlgorithm> DpAlgorithm::make(const DpAlgoConfig& cfg, comm::Group& dp, const model::Layout& layout) {
    SHARDLM_CHECK(cfg.local_steps >= 1, "--local-steps must be >= 1 (got ", cfg.local_steps, ")");
    switch (cfg.algo) {
        case DpAlgo::AllReduce: return std::unique_ptr<DpAlgorithm>(new AllReduceAlgo(cfg, dp, layout));
        case DpAlgo::Compressed: return std::unique_ptr<DpAlgorithm>(new Compressed(cfg, dp, layout));
        case DpAlgo::LocalSgd: return std::unique_ptr<DpAlgorithm>(new LocalSgd(cfg, dp, layout));
        case DpAlgo::Diloco: return std::unique_ptr<DpAlgorithm>(new Diloco(cfg, dp, layout));
        case DpAlgo::Gossip: return std::unique_ptr<DpAlgorithm>(new Gossip(cfg, dp, layout));
    }
    fail("unknown --dp-algo");
}

std::pair<double, double> consensus_parts(comm::Group& metrics, const model::Layout& layout, const float* params) {
    AlignedBuffer<float> mean(layout.total);
    std::memcpy(mean.data(), params, layout.total * sizeof(float));
    average(metrics, mean.data(), layout.total);
    double d = 0, b = 0;
    for (const model::ParamSpec& p : layout.params) {
        if (!p.counted()) continue;
        const float *x = params + p.offset, *m = mean.data() + p.offset;
        for (size_t i = 0; i < p.numel; i++) {
            d += double(x[i] - m[i]) * double(x[i] - m[i]);
            b += double(m[i]) * double(m[i]);
        }
    }
    return {d, b};
}

}  // namespace shardlm::parallel
