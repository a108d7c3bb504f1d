// bench/fit_planner.cpp: the planner against published training runs (docs/PLANNER.md, "Validation against published runs").
//
//   ./build/fit_planner [--cases tests/planner/published_runs.json] [--fit] [--show CASE_ID] [--contract]
//                       [--out docs/planner_cases.md]
//
// Without --fit: every case predicted with the presets' constants (planner/hardware.cpp), the ratio of
// predicted to published throughput (tokens/s per GPU) and peak memory, and per family and split the
// share within +-15 % (throughput) and +-10 % (memory). With --fit: the constants each GPU generation
// would take if chosen on the "fit" cases only (the allocator's overhead of each framework style on its
// memory cases, then a grid over gemm_max on the 16-bit cases, then fp8_gemm_max on the FP8 ones; flash
// attention's efficiency is the published kernels', not fitted), and the held-out error those constants
// give. The test (tests/planner/test_published_runs.cpp) holds the presets' constants to the held-out
// goals.
//
// Every case is read twice (validation.h Reading): as its source states it, and as a user who writes
// only the plan contract's keys on a GPU preset would ask it. The report (stdout, and --out FILE) has
// the summary per reading and split (within the bounds, the median and mean absolute error) and a
// row per case: prediction, published value and error in both readings, and the source. --contract
// with --show prints the contract reading's estimate.
#include <cstdio>
#include <fstream>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "shardlm/planner/explain.h"
#include "shardlm/planner/plan_io.h"
#include "shardlm/planner/validation.h"

using namespace shardlm;
using planner::PublishedCase;
using planner::Reading;

namespace {

struct Row {
    const PublishedCase* stated;
    planner::CaseResult as_stated, as_contract;
};

std::string percent(double ratio) {
    char b[32];
    std::snprintf(b, sizeof(b), "%+.1f %%", (ratio - 1) * 100);
    return b;
}

std::string fmt(const char* f, double v) {
    char b[64];
    std::snprintf(b, sizeof(b), f, v);
    return b;
}

// | reading | split | throughput within 15 % | median | mean | memory within 10 % | median |
std::string summary(const std::vector<Row>& rows) {
    std::map<std::string, std::pair<planner::Score, planner::Score>> by[2];  // reading -> family/split
    for (const Row& r : rows)
        for (int k = 0; k < 2; k++) {
            const planner::CaseResult& res = k ? r.as_contract : r.as_stated;
            for (const std::string& key : {r.stated->split, r.stated->family + " / " + r.stated->split}) {
                by[k][key].first.add(res.throughput_ratio, 0.15);
                by[k][key].second.add(res.memory_ratio, 0.10);
            }
        }
    std::string out =
        "| reading | cases | throughput within 15 % | median abs. error | mean | memory within 10 % | median abs. error |\n"
        "|---|---|---|---|---|---|---|\n";
    auto cells = [](const planner::Score& s, bool mean) {
        if (s.total == 0) return std::string(mean ? "| | | " : "| | ");
        return "| " + std::to_string(s.within) + " of " + std::to_string(s.total) + " | " +
               fmt("%.1f %%", 100 * s.median_error()) + (mean ? " | " + fmt("%.1f %%", 100 * s.mean_error()) : "") + " ";
    };
    for (int k = 0; k < 2; k++)
        for (bool families : {false, true})  // each split, then each family within it
            for (const auto& [key, s] : by[k]) {
                if ((key.find(" / ") != std::string::npos) != families) continue;
                out += "| " + std::string(k ? "contract" : "stated") + " | " + key + " " + cells(s.first, true) +
                       cells(s.second, false) + "|\n";
            }
    return out;
}

std::string case_table(const std::vector<Row>& rows) {
    std::string out =
        "| case | family | split | policy (stated) | tokens/s/GPU published | stated: predicted | error | contract: "
        "predicted | error | memory GB published | stated | error | contract | error | source |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const Row& r : rows) {
        const PublishedCase& c = *r.stated;
        out += "| " + c.id + " | " + c.family + " | " + c.split + " | " +
               (r.as_stated.estimate.consistent ? planner::describe(r.as_stated.estimate.policy)
                                                : "inconsistent: " + r.as_stated.estimate.reason);
        if (c.tokens_per_s_per_gpu > 0)
            out += " | " + fmt("%.0f", c.tokens_per_s_per_gpu) + " | " +
                   fmt("%.0f", r.as_stated.estimate.tokens_per_s_per_gpu) + " | " + percent(r.as_stated.throughput_ratio) +
                   " | " + fmt("%.0f", r.as_contract.estimate.tokens_per_s_per_gpu) + " | " +
                   percent(r.as_contract.throughput_ratio);
        else
            out += " | | | | | ";
        if (c.memory_bytes > 0)
            out += " | " + fmt("%.1f", c.memory_bytes / 1e9) + " | " +
                   fmt("%.1f", r.as_stated.memory_ratio * c.memory_bytes / 1e9) + " | " +
                   percent(r.as_stated.memory_ratio) + " | " +
                   fmt("%.1f", r.as_contract.memory_ratio * c.memory_bytes / 1e9) + " | " +
                   percent(r.as_contract.memory_ratio);
        else
            out += " | | | | | ";
        // the source's first 140 characters (the JSON has it whole)
        std::string source = c.source;
        if (source.size() > 140) source = source.substr(0, source.rfind(' ', 140)) + " ...";
        for (char& ch : source)
            if (ch == '|') ch = '/';
        out += " | " + source + " |\n";
    }
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    std::string path = "tests/planner/published_runs.json", show, out_path;
    bool fit = false, contract = false;
    for (int i = 1; i < argc; i++) {
        if (!std::strcmp(argv[i], "--cases") && i + 1 < argc) path = argv[++i];
        else if (!std::strcmp(argv[i], "--show") && i + 1 < argc) show = argv[++i];
        else if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out_path = argv[++i];
        else if (!std::strcmp(argv[i], "--fit")) fit = true;
        else if (!std::strcmp(argv[i], "--contract")) contract = true;
        else {
            std::fprintf(stderr, "usage: fit_planner [--cases FILE.json] [--fit] [--show ID] [--contract] [--out FILE.md]\n");
            return 2;
        }
    }
    const std::vector<PublishedCase> cases = planner::load_published_cases(path);
    const std::vector<PublishedCase> as_contract = planner::load_published_cases(path, Reading::Contract);
    for (const PublishedCase& c : contract ? as_contract : cases)
        if (c.id == show) {  // one case's whole estimate, every term
            const planner::CaseResult r = planner::predict(c);
            nlohmann::json j = planner::estimate_to_json(r.estimate);
            j["explanation"] = planner::dominant_terms(r.estimate);
            std::printf("%s\n%s\n%s", c.id.c_str(), j.dump(1).c_str(),
                        planner::format_terms(planner::explain_terms(c.model, c.cluster, c.job, r.estimate), r.estimate).c_str());
            return 0;
        }
    planner::FittedConstants fitted;
    if (fit) {
        fitted = planner::fit_constants(cases);
        std::printf("%s\n", fitted.log.c_str());
    }
    auto cluster_of = [&](const PublishedCase& c) { return fit ? planner::with_constants(c.cluster, fitted) : c.cluster; };
    std::vector<Row> rows;
    for (size_t i = 0; i < cases.size(); i++)
        rows.push_back({&cases[i], planner::predict(cases[i], cluster_of(cases[i])),
                        planner::predict(as_contract[i], cluster_of(as_contract[i]))});
    const std::string report = "## Summary\n\n" + summary(rows) + "\n## Every case\n\n" + case_table(rows);
    std::printf("%s", report.c_str());
    if (!out_path.empty()) {
        std::ofstream f(out_path);
        f << "# The planner against published runs\n\nWritten by `./build/fit_planner --out " << out_path
          << "` from `" << path
          << "` (docs/PLANNER.md, \"Validation against published runs\"; each case's whole source is in the JSON). Each case read as its source states it (*stated*) and as a user "
             "who writes only the plan contract's policy keys on the GPU preset by name would ask it (*contract*); "
             "error = predicted / published - 1.\n\n"
          << report;
        if (!f) {
            std::fprintf(stderr, "fit_planner: cannot write '%s'\n", out_path.c_str());
            return 1;
        }
    }
    return 0;
}
