#include "shardlm/train/trace_svg.h"

#include <algorithm>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "shardlm/core/check.h"
#include "shardlm/core/format.h"
#include "shardlm/train/svg_chart.h"

namespace shardlm::train {

using detail::xml_escape;

namespace {

// Compute first, then the pipeline's waits and the groups.
int track_rank(const std::string& t) {
    static const char* order[] = {"compute", "pipeline", "pp", "tp", "dp", "embedding", "world"};
    for (int i = 0; i < 7; i++)
        if (t == order[i]) return i;
    return 7;
}

const char* color_of(const std::string& name) {
    if (name.empty()) return "#999";
    if (name[0] == 'F' && name.size() > 1 && isdigit((unsigned char)name[1])) return "#4e79a7";
    if (name[0] == 'B' && name.size() > 1 && isdigit((unsigned char)name[1])) return "#59a14f";
    if (name.rfind("recv", 0) == 0) return "#d4d0cc";
    if (name == "send_recv") return "#9c755f";
    if (name == "all_reduce") return "#f28e2b";
    if (name == "all_gather") return "#edc948";
    if (name == "reduce_scatter") return "#e15759";
    if (name == "reduce grads") return "#b07aa1";
    if (name == "optimizer step") return "#ff9da7";
    return "#76b7b2";
}

}  // namespace

namespace {

struct Ev {
    std::string name;
    double t0, t1;
};
using Track = std::pair<int, int>;  // (pid, tid): a rank's thread

// The trace's complete events per track, the tracks' and processes' names, and the time span (ms).
struct Timeline {
    std::map<int, std::string> process;       // pid -> name
    std::map<Track, std::string> thread;      // track -> name
    std::map<Track, std::vector<Ev>> events;  // track -> events
    double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
};

Timeline read_timeline(const nlohmann::json& trace) {
    SHARDLM_CHECK(trace.is_object() && trace.contains("traceEvents") && trace["traceEvents"].is_array(),
                  "trace: expected an object with a 'traceEvents' list (written by `shardlm train --trace`)");
    Timeline tl;
    for (const auto& e : trace["traceEvents"]) {
        const std::string ph = e.value("ph", "");
        const int pid = e.value("pid", 0), tid = e.value("tid", 0);
        if (ph == "M") {
            if (e.value("name", "") == "process_name") tl.process[pid] = e["args"].value("name", "");
            if (e.value("name", "") == "thread_name") tl.thread[{pid, tid}] = e["args"].value("name", "");
            continue;
        }
        if (ph != "X") continue;
        const double t0 = e.value("ts", 0.0) / 1e3, t1 = t0 + e.value("dur", 0.0) / 1e3;  // ms
        tl.events[{pid, tid}].push_back({e.value("name", ""), t0, t1});
        tl.lo = std::min(tl.lo, t0);
        tl.hi = std::max(tl.hi, t1);
    }
    SHARDLM_CHECK(!tl.events.empty(), "trace: no events");
    return tl;
}

// The rows: per rank, its tracks in a fixed order.
std::vector<Track> rows_in_order(Timeline& tl) {
    std::vector<Track> rows;
    for (const auto& [key, evs] : tl.events) rows.push_back(key);
    std::sort(rows.begin(), rows.end(), [&](auto a, auto b) {
        if (a.first != b.first) return a.first < b.first;
        return track_rank(tl.thread[a]) < track_rank(tl.thread[b]);
    });
    return rows;
}

std::string title_of(const nlohmann::json& trace) {
    if (!trace.contains("otherData")) return "training step timeline";
    const auto& o = trace["otherData"];
    return shardlm::format("%s, %s schedule, %d micro-batches: pipeline bubble measured %.3f, theory %.3f",
                           o.value("layout", "").c_str(), o.value("schedule", "").c_str(), o.value("micro_batches", 0),
                           o.value("bubble_measured", 0.0), o.value("bubble_theory", 0.0));
}

std::string trace_legend_svg() {
    std::string svg;
    int lx = 10;
    for (const char* n : {"F: forward", "B: backward", "recv wait", "send_recv", "all_reduce", "all_gather",
                          "reduce_scatter", "reduce grads", "optimizer step"}) {
        std::string key = n;
        const std::string c = color_of(key == "F: forward" ? "F0" : key == "B: backward" ? "B0" : key == "recv wait" ? "recv" : key);
        svg += shardlm::format("<rect x=\"%d\" y=\"30\" width=\"10\" height=\"10\" fill=\"%s\"/>", lx, c.c_str());
        svg += shardlm::format("<text x=\"%d\" y=\"39\">%s</text>\n", lx + 14, xml_escape(n).c_str());
        lx += 14 + int(key.size()) * 7 + 14;
    }
    return svg;
}

}  // namespace

std::string trace_svg(const nlohmann::json& trace, int width) {
    Timeline tl = read_timeline(trace);
    const std::vector<Track> rows = rows_in_order(tl);
    const double lo = tl.lo, hi = tl.hi;
    const int left = 230, right = 20, top = 56, row_h = 18, gap = 8, axis_h = 34;
    int h = top;
    std::map<Track, int> row_y;
    int last_pid = -1;
    for (auto key : rows) {
        if (key.first != last_pid && last_pid >= 0) h += gap;
        last_pid = key.first;
        row_y[key] = h;
        h += row_h;
    }
    const int height = h + axis_h + 28;
    const double plot_w = width - left - right;
    const NiceScale xs = nice_scale(0.0, hi - lo, 10);
    auto X = [&](double t) { return left + (t - lo) / (xs.hi - xs.lo) * plot_w; };
    std::string svg = shardlm::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                          "font-family=\"sans-serif\" font-size=\"11\">\n",
                          width, height);
    svg += shardlm::format("<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", width, height);
    svg += "<text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">" + xml_escape(title_of(trace)) + "</text>\n";
    svg += trace_legend_svg();
    // grid and axis
    for (double t : xs.ticks) {
        const double x = left + (t - xs.lo) / (xs.hi - xs.lo) * plot_w;
        svg += shardlm::format("<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#eee\"/>", x, top - 4, x, h);
        svg += shardlm::format("<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", x, h + 14,
                   format_tick(t, xs.step).c_str());
    }
    svg += shardlm::format("<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">milliseconds</text>\n", left + plot_w / 2, h + 30);
    for (auto key : rows) {
        const int y = row_y[key];
        svg += shardlm::format("<text x=\"4\" y=\"%d\">%s</text>", y + 13,
                   xml_escape(tl.process[key.first] + " " + tl.thread[key]).c_str());
        for (const Ev& e : tl.events[key]) {
            const double x0 = X(e.t0), w = std::max(0.6, X(e.t1) - x0);
            svg += shardlm::format("<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\" stroke=\"white\" "
                       "stroke-width=\"0.3\"><title>%s %.2f ms</title></rect>",
                       x0, y + 1, w, row_h - 2, color_of(e.name), xml_escape(e.name).c_str(), e.t1 - e.t0);
            if (w > 7.0 * double(e.name.size()) && (e.name[0] == 'F' || e.name[0] == 'B'))
                svg += shardlm::format("<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\" fill=\"white\">%s</text>", x0 + w / 2, y + 13,
                           xml_escape(e.name).c_str());
        }
        svg += "\n";
    }
    return svg + "</svg>\n";
}

}  // namespace shardlm::train
