// train/report.h: `shardlm report RUN_DIR`: training curves as hand-written SVG and a one-page HTML
// summary of a run directory (metrics.jsonl, optional config.json and summary.json). The SVG charts
// (ChartSpec, svg_line_chart, nice_scale) are in train/svg_chart.h, included here.
//
//   auto written = shardlm::train::write_report("runs/small");  // loss.svg ... report.html
//
// Everything is written atomically into RUN_DIR; nothing else there is touched.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "shardlm/train/svg_chart.h"

namespace shardlm::train {

// One optimiser step of metrics.jsonl, after merging repeated steps. A number the file does not
// carry (or carries as null / nan / inf) is NaN here.
struct MetricsRow {
    static constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
    int64_t step = 0;
    bool has_train = false;  // some line of this step carried `loss` (and the other train keys)
    double loss = kNaN, grad_norm = kNaN, lr = kNaN, step_ms = kNaN, tokens_per_s = kNaN;
    double val_loss = kNaN;  // validation loss measured after this step
    // a mixture of experts: the balance loss (1 when balanced) and the largest expert's share of its layer's
    // choices, over the MoE layers (NaN for a dense model)
    double aux_loss = kNaN, load_max = kNaN;
    // training health (train/health.h), on --health-every steps: per unit (unit_names), else empty
    std::vector<std::string> units;
    std::vector<double> unit_grad_norm, update_ratio, act_rms;
};

// Reads metrics.jsonl: one object per line, blank lines ignored, rows sorted by step.
// A repeated step (a resumed run re-writes the steps after its last checkpoint): the last
// occurrence wins. A train line replaces the earlier train line of its step and drops that step's
// older val_loss (it belonged to the replaced trajectory); a val-only line {"step", "val_loss"}
// sets the val_loss of its step and keeps its train numbers. Lines with neither `loss` nor
// `val_loss` are ignored. Bare nan / inf / -inf tokens (what printf writes for a diverged run)
// are read as NaN. A malformed line throws shardlm::Error naming the file and the line number.
std::vector<MetricsRow> read_metrics(const std::string& path);

// Writes loss.svg, tokens_per_s.svg, lr.svg, grad_norm.svg (a mixture of experts' two charts, the three of
// training health where metrics.jsonl has them) and report.html into run_dir and returns their paths in that order.
std::vector<std::string> write_report(const std::string& run_dir);

}  // namespace shardlm::train
