// train/svg_chart.h: hand-written SVG line charts (the training curves of `shardlm report`) and their
// axis ticks. train/report.h includes this header.
//
//   ChartSpec c;
//   c.title = "Loss", c.x_label = "step", c.y_label = "loss";
//   c.series.push_back({"train", steps, losses});
//   std::string svg = shardlm::train::svg_line_chart(c);
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>


namespace shardlm::train {

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

namespace detail {

// Shared with report.cpp's HTML: XML-escapes & < > " ' (text and attribute values alike).
std::string xml_escape(std::string_view s);


}  // namespace detail

}  // namespace shardlm::train
