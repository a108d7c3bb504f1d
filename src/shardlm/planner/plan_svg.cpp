// planner/plan_svg.cpp: plan_svg (plan_report.h): a stacked memory bar and a stacked step-time bar per
// policy, hand-written SVG (no dependencies), viewable in any browser.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "shardlm/core/check.h"
#include "shardlm/planner/plan_report.h"

namespace shardlm::planner {

namespace {

constexpr double kLabelW = 330, kPanelW = 390, kGap = 50, kLeft = 10, kTop = 100, kRowH = 46, kBarH = 18;
constexpr double kMemX = kLeft + kLabelW, kTimeX = kMemX + kPanelW + kGap, kWidth = kTimeX + kPanelW + 20;

struct Segment {
    const char* name;
    const char* color;
    double value;
};

std::string num(double x) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f", x);
    return buf;
}

std::string escape(const std::string& s) {
    std::string out;
    for (char ch : s) {
        if (ch == '&') out += "&amp;";
        else if (ch == '<') out += "&lt;";
        else if (ch == '>') out += "&gt;";
        else out += ch;
    }
    return out;
}

std::string text(double x, double y, const std::string& s, const char* extra = "") {
    return cat("<text x=\"", num(x), "\" y=\"", num(y), "\" ", extra, ">", escape(s), "</text>\n");
}

std::string rect(double x, double y, double w, double h, const char* color, const std::string& title) {
    return cat("<rect x=\"", num(x), "\" y=\"", num(y), "\" width=\"", num(std::max(w, 0.0)), "\" height=\"", num(h),
               "\" fill=\"", color, "\"><title>", escape(title), "</title></rect>\n");
}

std::vector<Segment> memory_segments(const Estimate& e) {
    const MemoryBreakdown& m = e.memory;
    return {{"parameters", "#4e79a7", m.params / 1e9},    {"gradients", "#f28e2b", m.grads / 1e9},
            {"optimizer", "#e15759", m.optimizer / 1e9},  {"activations", "#76b7b2", m.activations / 1e9},
            {"buffers", "#bab0ac", m.buffers / 1e9}};
}

std::vector<Segment> time_segments(const Estimate& e) {
    const TimeBreakdown& t = e.time;
    return {{"compute", "#59a14f", t.compute},       {"TP comm", "#edc948", t.tp_comm},
            {"CP comm", "#b07aa1", t.cp_comm},       {"EP all-to-all", "#86bcb6", t.ep_comm},
            {"PP bubble", "#ff9da7", t.pp_bubble},
            {"PP send/recv", "#9c755f", t.pp_comm},  {"DP/ZeRO comm", "#d37295", t.dp_comm},
            {"optimizer", "#79706e", t.optimizer}};
}

// Entries left to right, wrapping within the panel's width.
std::string legend(double x0, double y, const std::vector<Segment>& segs) {
    std::string out;
    double x = x0;
    for (const Segment& s : segs) {
        const double w = 24 + 6.5 * double(std::string(s.name).size());
        if (x + w > x0 + kPanelW) x = x0, y += 16;
        out += rect(x, y - 10, 10, 10, s.color, s.name) + text(x + 14, y, s.name, "font-size=\"11\"");
        x += w;
    }
    return out;
}

std::string bar(double x0, double y, double scale, const std::vector<Segment>& segs, const char* unit) {
    std::string out;
    double x = x0, total = 0;
    for (const Segment& s : segs) {
        out += rect(x, y, s.value * scale, kBarH, s.color, cat(s.name, ": ", num(s.value), " ", unit));
        x += s.value * scale, total += s.value;
    }
    return out + text(x + 4, y + 13, num(total) + " " + unit, "font-size=\"11\"");
}

// A round axis maximum >= x whose quarters are round too.
double nice_max(double x) {
    if (!(x > 0)) return 1;
    const double p = std::pow(10.0, std::floor(std::log10(x)));
    for (double m : {1.0, 1.2, 1.6, 2.0, 2.4, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0})
        if (m * p >= x) return m * p;
    return 10 * p;
}

std::string axis(double x0, double y, double max, const char* unit) {
    std::string out = cat("<line x1=\"", num(x0), "\" y1=\"", num(y), "\" x2=\"", num(x0 + kPanelW), "\" y2=\"", num(y),
                          "\" stroke=\"#999\"/>\n");
    for (int i = 0; i <= 4; i++) {
        const double v = max * i / 4, x = x0 + kPanelW * i / 4;
        out += text(x - 8, y + 14, num(v), "font-size=\"10\" fill=\"#555\"");
    }
    return out + text(x0 + kPanelW / 2 - 20, y + 28, unit, "font-size=\"11\"");
}

}  // namespace

std::string plan_svg(const std::vector<Estimate>& rows, const Cluster& c, const std::string& title) {
    double mem_max = c.gpu.memory_gb, time_max = 0;
    for (const Estimate& e : rows) mem_max = std::max(mem_max, e.memory.total() / 1e9), time_max = std::max(time_max, e.step_time_s);
    mem_max = nice_max(mem_max), time_max = nice_max(time_max);
    const double height = kTop + kRowH * double(rows.size()) + 44;
    std::string out = cat("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", num(kWidth), "\" height=\"", num(height),
                          "\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
    out += text(kLeft, 22, title, "font-size=\"15\" font-weight=\"bold\"");
    out += text(kMemX, 44, "memory per GPU (fullest stage), GB", "font-size=\"12\" font-weight=\"bold\"");
    out += text(kTimeX, 44, "step time, s", "font-size=\"12\" font-weight=\"bold\"");
    if (!rows.empty()) out += legend(kMemX, 64, memory_segments(rows[0])) + legend(kTimeX, 64, time_segments(rows[0]));
    for (size_t i = 0; i < rows.size(); i++) {
        const Estimate& e = rows[i];
        const Policy& p = e.policy;
        const double y = kTop + kRowH * double(i);
        out += text(kLeft, y + 12, cat("#", i + 1, "  tp=", p.tp, " pp=", p.pp, " dp=", p.dp, p.cp > 1 ? cat(" cp=", p.cp) : "",
                                       " v=", p.virtual_stages, " mb=", p.micro_batch, " zero=", p.zero_stage),
                    "font-size=\"12\"");
        out += text(kLeft, y + 27, cat("recompute ", cost::recompute_name(p.recompute), p.sequence_parallel ? ", sp" : "",
                                       " | ", num(e.tokens_per_s / 1e3), "k tok/s | MFU ", num(100 * e.mfu), " %"),
                    "font-size=\"11\" fill=\"#444\"");
        out += bar(kMemX, y + 4, kPanelW / mem_max, memory_segments(e), "GB");
        out += bar(kTimeX, y + 4, kPanelW / time_max, time_segments(e), "s");
    }
    const double axis_y = kTop + kRowH * double(rows.size());
    const double cap_x = kMemX + kPanelW * c.gpu.memory_gb / mem_max;
    out += cat("<line x1=\"", num(cap_x), "\" y1=\"", num(kTop - 4), "\" x2=\"", num(cap_x), "\" y2=\"", num(axis_y),
               "\" stroke=\"#c00\" stroke-dasharray=\"4 3\"><title>GPU memory ", num(c.gpu.memory_gb),
               " GB</title></line>\n");
    out += axis(kMemX, axis_y, mem_max, "GB") + axis(kTimeX, axis_y, time_max, "s");
    return out + "</svg>\n";
}

}  // namespace shardlm::planner
