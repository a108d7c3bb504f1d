// bench/bench_train_step.cpp: one full training step (forward, backward, AdamW) of a preset
// (default GPT-2 124M), timed over several steps on random tokens. Prints one JSON line with
// tokens/s, MFU against the fp32 peak given with --peak-gflops, and peak RSS.
// Usage: bench_train_step --batch B --seq T [--model gpt2] [--threads K] [--steps N] [--warmup W] [--peak-gflops P]
//                         [--matmul-precision fp32|bf16] [--precision fp32|bf16|fp16] [--recompute none|full|selective]
//                         [--n-layer L --n-head H --n-embd C] [--tie-embeddings true|false] (reshape the preset)
//                         [--thread-split auto|batch|kernel] [--attention fused|materialized] [--n-ctx N]
//                         [--gemm auto|onednn|openblas]
//                         [--profile 1]: after the run, per kernel of a step (stderr): time, share of the step,
//                         GFLOP/s against the peak measured now, GB/s against a STREAM triad measured now
//                         (each kernel's roofline), and what no kernel accounts for; [--profile 2]: the same with
//                         each GEMM shape on a row of its own instead of "matmul forward/backward" ("bf16 fb>f NN
//                         MxNxK": operand types A, B > C, layouts N rows contiguous, T columns contiguous); what
//                         the matmul kernels did around their products then shows apart (a bf16 product's row names
//                         the library that ran it, "bf16 fb>f onednn NN 512x768x1024", and is measured against the
//                         peak of that library's ISA: AMX, AVX512_BF16 or the fp32 FMA): "bias backward" and
//                         "bf16 rounding" rows, and the bias's broadcast and fp16 widening in "not in a kernel"
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "shardlm/core/check.h"
#include "shardlm/core/profile.h"
#include "shardlm/core/runtime.h"
#include "shardlm/core/timer.h"
#include "shardlm/kernels/machine.h"
#include "shardlm/data/token_shard.h"
#include "shardlm/model/config.h"
#include "shardlm/model/layout.h"
#include "shardlm/train/trainer.h"
#include "bench_options.h"

namespace {

constexpr const char* kUsage =
    "usage: bench_train_step [--batch B=4] [--seq T=64] [--model gpt2] [--threads K=2] [--steps N=5] [--warmup W=1]\n"
    "                        [--peak-gflops P] [--matmul-precision fp32|bf16] [--precision fp32|bf16|fp16]\n"
    "                        [--recompute none|full|selective] [--n-layer L] [--n-head H] [--n-embd C] [--n-ctx N]\n"
    "                        [--tie-embeddings true|false] [--thread-split auto|batch|kernel]\n"
    "                        [--attention fused|materialized] [--gemm auto|onednn|openblas] [--profile 0|1|2]\n"
    "(what each does: the comment at the top of bench/bench_train_step.cpp)\n";

int whole(const std::string& k, const char* v, int lo) { return whole_or_exit("bench_train_step", k, v, lo); }

// Each kernel's time per step, its share, and its rate against its roofline: the FMA (or bf16 dot)
// peak for the ones that compute, the triad for the ones that move memory.
void print_profile(const std::map<std::string, shardlm::profile::Totals>& k, const std::vector<double>& ms, int steps,
                   int threads, bool bf16, shardlm::kernels::GemmBackend gemm) {
    namespace kn = shardlm::kernels;
    const kn::MachineInfo m = kn::machine_info(threads, 0.4);
    const double bw = triad_gbps(), step_s = std::accumulate(ms.begin(), ms.end(), 0.0) / 1e3 / steps;
    // the roof of the products: the peak of the instruction set the step's bf16 products ran on at best
    // (AMX where oneDNN runs them on its tiles, VDPBF16PS, or the FMA where they are widened)
    const kn::ProductIsa isa = bf16 ? kn::bf16_products_isa(gemm) : kn::ProductIsa::Fp32Fma;
    const double peak = m.peak(isa);
    std::fprintf(stderr, "profile: %d steps of %.1f ms; roofs measured now: %s peak %.0f GFLOP/s, triad %.1f GB/s, %d threads\n",
                 steps, step_s * 1e3, shardlm::platform::product_isa_name(isa), peak, bw, threads);
    // Each row against the peak of what ran it: --profile 2's bf16 product rows name their library ("bf16 fb>f
    // onednn NN 512x768x1024"): its ISA's; --profile 1's "matmul forward/backward" rows: the step's products' roof;
    // every other row (fp32 products, attention, the optimiser: fp32 arithmetic) the fp32 FMA's
    auto row_peak = [&](const std::string& name) {
        if (name.rfind("bf16 ", 0) == 0)
            for (kn::GemmBackend lib : {kn::GemmBackend::OneDnn, kn::GemmBackend::Native, kn::GemmBackend::OpenBlas})
                if (name.find(shardlm::cat(" ", shardlm::setting_text(lib), " ")) != std::string::npos)
                    return m.peak(kn::product_isa(lib, kn::GemmKind::Bf16));
        return name.rfind("matmul ", 0) == 0 ? peak : m.fp32_peak_gflops;
    };
    std::fprintf(stderr, "%-28s %8s %8s %7s %9s %7s %8s %7s\n", "kernel", "calls", "ms/step", "share", "GFLOP/s", "of peak",
                 "GB/s", "of bw");
    std::vector<std::pair<std::string, shardlm::profile::Totals>> rows(k.begin(), k.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    double covered = 0;
    for (const auto& [name, x] : rows) {
        // wall seconds per step (a lane's call counts its share of the threads running at once), and the
        // rates over them: the whole machine's, against the whole machine's roofs
        const double s = x.wall / steps;
        covered += s;
        std::fprintf(stderr, "%-28s %8.1f %8.2f %6.1f%%", name.c_str(), double(x.calls) / steps, s * 1e3, 100 * s / step_s);
        if (x.flops > 0)
            std::fprintf(stderr, " %9.1f %6.1f%%", x.flops / x.wall / 1e9, 100 * x.flops / x.wall / 1e9 / row_peak(name));
        else
            std::fprintf(stderr, " %9s %7s", "", "");
        std::fprintf(stderr, " %8.1f %6.1f%%\n", x.bytes / x.wall / 1e9, 100 * x.bytes / x.wall / 1e9 / bw);
    }
    std::fprintf(stderr, "%-28s %8s %8.2f %6.1f%%   (conversions, copies, optimiser bookkeeping, waiting)\n",
                 "not in a kernel", "", (step_s - covered) * 1e3, 100 * (step_s - covered) / step_s);
}

}  // namespace

int main(int argc, char** argv) {
    shardlm::ensure_blas_coretype(argc, argv);
    int B = 4, T = 64, threads = 2, steps = 5, warmup = 1, profile = 0;
    double peak = 0;
    std::string model = "gpt2", precision = "fp32", mixed = "fp32", recompute = "none", split = "auto", attention = "fused", gemm = "auto";
    int n_layer = 0, n_head = 0, n_embd = 0, n_ctx = 0;
    std::string tie;  // --tie-embeddings true|false (empty: the preset's)
    for (int i = 1; i < argc; i++)
        if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
            std::fputs(kUsage, stdout);  // (a lone --help had been dropped and the GPT-2 step run)
            return 0;
        }
    if (!options_paired("bench_train_step", argc, argv)) return 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string k = argv[i];
        const char* v = argv[i + 1];
        if (k == "--batch") B = whole(k, v, 1);
        else if (k == "--seq") T = whole(k, v, 1);
        else if (k == "--threads") threads = whole(k, v, 1);
        else if (k == "--steps") steps = whole(k, v, 1);
        else if (k == "--warmup") warmup = whole(k, v, 0);
        else if (k == "--peak-gflops") {
            char* end = nullptr;
            peak = std::strtod(v, &end);
            if (end == v || *end != '\0' || !(peak >= 0)) {
                std::fprintf(stderr, "bench_train_step: --peak-gflops %s: give a number of GFLOP/s, 0 or more (0: no MFU)\n", v);
                return 2;
            }
        }
        else if (k == "--model") model = v;
        else if (k == "--matmul-precision") precision = v;
        else if (k == "--precision") mixed = v;
        else if (k == "--recompute") recompute = v;
        else if (k == "--thread-split") split = v;
        else if (k == "--attention") attention = v;
        else if (k == "--gemm") gemm = v;
        else if (k == "--profile") {
            profile = whole(k, v, 0);
            if (profile > 2) return std::fprintf(stderr, "bench_train_step: --profile is 0, 1 or 2, not %d\n", profile), 2;
        }
        else if (k == "--n-ctx") n_ctx = whole(k, v, 1);
        else if (k == "--n-layer") n_layer = whole(k, v, 1);
        else if (k == "--n-head") n_head = whole(k, v, 1);
        else if (k == "--n-embd") n_embd = whole(k, v, 1);
        else if (k == "--tie-embeddings") tie = v;
        else { std::fprintf(stderr, "bench_train_step: unknown option %s\n%s", k.c_str(), kUsage); return 2; }
    }
    shardlm::train::TrainConfig cfg;
    cfg.model.preset = model;
    cfg.model.n_layer = n_layer, cfg.model.n_head = n_head, cfg.model.n_embd = n_embd;
    using shardlm::train::parse_setting;
    parse_setting("--tie-embeddings", tie, &cfg.model.tie_embeddings);
    if (n_ctx > 0) cfg.model.n_ctx = n_ctx;
    parse_setting("--attention", attention, &cfg.runtime.attention);
    parse_setting("--matmul-precision", precision, &cfg.precision.matmul_precision);
    parse_setting("--precision", mixed, &cfg.precision.policy);
    parse_setting("--recompute", recompute, &cfg.runtime.recompute);
    parse_setting("--thread-split", split, &cfg.runtime.thread_split);
    parse_setting("--gemm", gemm, &cfg.runtime.gemm);
    cfg.fold_aliases();
    shardlm::model::GptConfig mc = cfg.model.config();
    // random tokens, enough for every step
    std::mt19937 rng(1);
    std::vector<uint16_t> tok(size_t(B) * T * (steps + warmup) + 1);
    for (auto& t : tok) t = uint16_t(rng() % mc.vocab_size);
    std::string shard = (std::filesystem::temp_directory_path() / ("bench_step_" + std::to_string(::getpid()) + ".bin")).string();
    shardlm::data::write_token_shard(shard, tok);

    cfg.data.train = shard;
    cfg.data.seq = T;
    cfg.data.global_batch = cfg.data.micro_batch = B;
    cfg.data.steps = steps + warmup;
    cfg.optim.optimizer = shardlm::optim::Kind::AdamW;
    cfg.optim.lr = 6e-4f;
    cfg.optim.weight_decay = 0.1f;
    cfg.optim.grad_clip = 1.0f;
    cfg.runtime.threads = threads;
    shardlm::train::Trainer trainer(cfg);
    std::vector<double> ms;
    for (int s = 0; s < steps + warmup; s++) {
        if (profile && s == warmup)
            shardlm::profile::take(), shardlm::profile::set_by_shape(profile == 2), shardlm::profile::enable(true);
        auto st = trainer.train_step(s);
        if (s >= warmup) ms.push_back(st.step_ms);
    }
    if (profile) {
        shardlm::profile::enable(false);
        print_profile(shardlm::profile::take(), ms, steps, threads, cfg.precision.resolved().bf16_products(), cfg.runtime.gemm);
    }
    std::remove(shard.c_str());
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    double med = sorted[sorted.size() / 2], mean = 0;
    for (double m : ms) mean += m / ms.size();
    auto pc = shardlm::model::count_params(mc);
    double flops_per_token = 6.0 * double(pc.total) + 12.0 * mc.n_layer * T * mc.n_embd;
    double tps = double(B) * T / (med / 1e3);
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    std::printf("{\"impl\": \"shardlm\", \"attention\": \"%s\", \"model\": \"%s\", \"precision\": \"%s\", \"recompute\": \"%s\", \"matmul_precision\": \"%s\", \"n_layer\": %d, \"n_embd\": %d, \"B\": %d, \"T\": %d, \"threads\": %d, \"tokens_per_s\": %.2f, "
                "\"step_ms_median\": %.1f, \"step_ms_mean\": %.1f, \"tflops_per_step\": %.3f, \"achieved_gflops\": %.1f, "
                "\"mfu\": %.4f, \"peak_rss_mib\": %.0f, \"gemm\": \"%s\"}\n",
                attention.c_str(), model.c_str(), mixed.c_str(), recompute.c_str(), precision.c_str(), mc.n_layer, mc.n_embd, B, T, threads, tps, med, mean, flops_per_token * B * T / 1e12,
                flops_per_token * tps / 1e9, peak > 0 ? flops_per_token * tps / 1e9 / peak : 0.0, ru.ru_maxrss / 1024.0,
                shardlm::kernels::gemm_summary().c_str());
}
