// train/report.h: `shardlm report RUN_DIR`: training curves as hand-written SVG and a one-page HTML
// summary of a run directory (metrics.jsonl, optional config.json and summary.json).
//
//   auto written = shardlm::train::write_report("runs/small");  // loss.svg ... report.html
//
// Everything is written atomically into RUN_DIR; nothing else there is touched.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace shardlm::train {

// One optimiser step of metrics.jsonl, after merging repeated steps. A number the file does not
// carry (or carries as null / nan / inf) is NaN here.
struct MetricsRow {
    static constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
    int64_t step = 0;
    bool has_train = false;  // some line of this step carried `loss` (and the other train keys)
    double loss = kNaN, grad_norm = kNaN, lr = kNaN, step_ms = kNaN, tokens_per_s = kNaN;
    double val_loss = kNaN;  // validation loss measured after this step
};

// Reads metrics.jsonl: one object per line, blank lines ignored, rows sorted by step.
// A repeated step (a resumed run re-writes the steps after its last checkpoint): the last
// occurrence wins. A train line replaces the earlier train line of its step and drops that step's
// older val_loss (it belonged to the replaced trajectory); a val-only line {"step", "val_loss"}
// sets the val_loss of its step and keeps its train numbers. Lines with neither `loss` nor
// `val_loss` are ignored. Bare nan / inf / -inf tokens (what printf writes for a diverged run)
// are read as NaN. A malformed line throws shardlm::Error naming the file and the line number.
std::vector<MetricsRow> read_metrics(const std::string& path);

// "Nice" axis ticks: steps of 1, 2 or 5 times a power of ten, covering [lo, hi].
struct NiceScale {
    double lo = 0, hi = 1;      // axis range: [lo, hi] widened to whole ticks
    double step = 1;            // distance between ticks
    std::vector<double> ticks;  // lo, lo + step, ..., hi
};
// About `target` ticks (never fewer than 2). lo == hi is widened around the value; non-finite
// or reversed bounds are handled (NaN/inf -> [0, 1], lo > hi swapped).
NiceScale nice_scale(double lo, double hi, int target = 6);
// A tick label that shows just enough digits for `step`: "1500", "2.5", "120k", "1.5M", "6e-4".
std::string format_tick(double v, double step);

struct ChartSeries {
    std::string name;            // legend text; a chart whose series all have no name has no legend
    std::vector<double> x, y;    // same length; points with a non-finite x or y are skipped
    std::string color;           // CSS colour; empty: the next colour of the palette
    bool line = true;            // draw a polyline through the points
    bool markers = false;        // draw a dot at every point
};

struct ChartSpec {
    std::string title, x_label, y_label;
    std::vector<ChartSeries> series;
    int width = 720, height = 360;
    // Element ids in the SVG (clip path) are prefixed with this, so that several charts can be
    // inlined in one HTML page; empty: derived from the title.
    std::string id;
    // More points than this in one series: the polyline is downsampled (min and max of each
    // bucket, first and last point kept), so that spikes survive.
    size_t max_points = 2000;
    // The x values are integers (steps): the x axis spans at least 5 and has whole-number ticks.
    bool x_integer = false;
};

// A standalone SVG document (starts with "<svg", has xmlns) with title, axes, ticks, grid,
// one polyline per series and a legend above the plot area (never over the data). All text is
// XML-escaped; non-finite values never reach the output.
std::string svg_line_chart(const ChartSpec& spec);

// Writes loss.svg, tokens_per_s.svg, lr.svg, grad_norm.svg and report.html into run_dir and
// returns their paths in that order.
std::vector<std::string> write_report(const std::string& run_dir);

}  // namespace shardlm::train
