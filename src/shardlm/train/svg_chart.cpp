// train/svg_chart.cpp: the SVG line charts of train/svg_chart.h, written by hand: a title, a legend
// in the header band above the plot, a plot area with light grid lines, axes with 1-2-5 ticks, and
// one polyline per series (clipped to the plot area).
#include "shardlm/train/svg_chart.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <iterator>
#include <tuple>
#include <utility>

#include "shardlm/core/format.h"

namespace shardlm::train {

using detail::xml_escape;

namespace {

std::string slug(std::string_view s) {
    std::string out;
    for (char c : s) {
        if (std::isalnum(static_cast<unsigned char>(c))) out += char(std::tolower(static_cast<unsigned char>(c)));
        else if (!out.empty() && out.back() != '-') out += '-';
    }
    while (!out.empty() && out.back() == '-') out.pop_back();
    return out.empty() ? "chart" : out;
}

const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"};

struct Pt {
    double x, y;
};

// The finite points of a series, downsampled to about max_points by keeping the min and max of
// each bucket (in their original order) plus the first and last point.
std::vector<Pt> chart_points(const ChartSeries& s, size_t max_points) {
    std::vector<Pt> pts;
    size_t n = std::min(s.x.size(), s.y.size());
    pts.reserve(n);
    for (size_t i = 0; i < n; i++)
        if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) pts.push_back({s.x[i], s.y[i]});
    max_points = std::max<size_t>(max_points, 4);
    if (pts.size() <= max_points) return pts;
    size_t buckets = (max_points - 2) / 2, inner = pts.size() - 2;
    std::vector<Pt> out;
    out.reserve(2 * buckets + 2);
    out.push_back(pts.front());
    for (size_t b = 0; b < buckets; b++) {
        size_t lo = 1 + b * inner / buckets, hi = 1 + (b + 1) * inner / buckets;
        if (lo >= hi) continue;
        size_t imin = lo, imax = lo;
        for (size_t i = lo; i < hi; i++) {
            if (pts[i].y < pts[imin].y) imin = i;
            if (pts[i].y > pts[imax].y) imax = i;
        }
        out.push_back(pts[std::min(imin, imax)]);
        if (imin != imax) out.push_back(pts[std::max(imin, imax)]);
    }
    out.push_back(pts.back());
    return out;
}

}  // namespace

namespace detail {

std::string xml_escape(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            case '\'': out += "&#39;"; break;
            default: out += c;
        }
    }
    return out;
}

}  // namespace detail

// --- ticks ---

NiceScale nice_scale(double lo, double hi, int target) {
    NiceScale s;
    if (!std::isfinite(lo) || !std::isfinite(hi) || !std::isfinite(hi - lo)) lo = 0, hi = 1;
    if (lo > hi) std::swap(lo, hi);
    double mag_abs = std::max(std::fabs(lo), std::fabs(hi));
    if (hi - lo <= 1e-12 * mag_abs || hi == lo) {
        double d = mag_abs == 0 ? 1.0 : 0.1 * mag_abs;
        lo -= d, hi += d;
    }
    target = std::max(target, 2);
    double raw = (hi - lo) / (target - 1);
    double mag = std::pow(10.0, std::floor(std::log10(raw)));
    double r = raw / mag;
    double nice = r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10;
    s.step = nice * mag;
    s.lo = std::floor(lo / s.step + 1e-9) * s.step;
    s.hi = std::ceil(hi / s.step - 1e-9) * s.step;
    long n = std::lround((s.hi - s.lo) / s.step);
    for (long i = 0; i <= n && i <= 1000; i++) {
        double v = s.lo + double(i) * s.step;
        if (std::fabs(v) < s.step * 1e-9) v = 0;
        s.ticks.push_back(v);
    }
    return s;
}

std::string format_tick(double v, double step) {
    if (!std::isfinite(v)) return "";
    step = std::fabs(step);
    if (!(step > 0) || !std::isfinite(step)) step = std::max(std::fabs(v), 1.0);
    if (std::fabs(v) < step * 1e-6) return "0";
    auto decimals = [](double st) { return std::max(0, int(-std::floor(std::log10(st) + 1e-9))); };
    if (step >= 1e4) {
        // The unit follows the step, so that one axis never mixes units ("900k", "1M").
        double scale = step >= 2e8 ? 1e9 : step >= 2e5 ? 1e6 : 1e3;
        const char* unit = scale == 1e9 ? "G" : scale == 1e6 ? "M" : "k";
        return shardlm::format("%.*f", decimals(step / scale), v / scale) + unit;
    }
    if (step < 1e-3) {
        int digits = std::max(0, int(std::floor(std::log10(std::fabs(v)) + 1e-9) - std::floor(std::log10(step) + 1e-9)));
        std::string s = shardlm::format("%.*e", digits, v);  // "1.2e-03"
        size_t e = s.find('e');
        std::string mant = s.substr(0, e), ex = s.substr(e + 1);
        bool neg = ex[0] == '-';
        size_t k = 1;
        while (k + 1 < ex.size() && ex[k] == '0') k++;
        return mant + "e" + (neg ? "-" : "") + ex.substr(k);
    }
    return shardlm::format("%.*f", decimals(step), v);
}

// --- SVG ---

namespace {

// The plot's geometry: the image, its margins, the plot area, the axes' ranges and the data-to-pixel maps.
struct Frame {
    double W, H, ml = 74, mr = 22, mt = 46, mb = 52;  // margins around the plot area
    double pw, ph;
    NiceScale xs, ys;
    double ax0, ax1, ay0, ay1;
    bool empty;  // no point at all
    double px(double x) const { return ml + (x - ax0) / (ax1 - ax0) * pw; }
    double py(double y) const { return mt + ph - (y - ay0) / (ay1 - ay0) * ph; }
};

Frame frame_of(const ChartSpec& spec, const std::vector<std::vector<Pt>>& pts) {
    Frame f;
    f.W = std::max(spec.width, 200), f.H = std::max(spec.height, 150);
    f.pw = f.W - f.ml - f.mr, f.ph = f.H - f.mt - f.mb;
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    for (const auto& series : pts)
        for (const Pt& p : series) {
            xlo = std::min(xlo, p.x), xhi = std::max(xhi, p.x);
            ylo = std::min(ylo, p.y), yhi = std::max(yhi, p.y);
        }
    f.empty = !(xlo <= xhi);
    if (f.empty) xlo = 0, xhi = 1, ylo = 0, yhi = 1;
    if (spec.x_integer && xhi - xlo < 5) xhi = xlo + 5;  // a short run: ticks 0, 1, ..., 5 (not 0.2, 0.4)
    f.xs = nice_scale(xlo, xhi, 8), f.ys = nice_scale(ylo, yhi, 6);
    // The axes span the ticks, plus a little room on a side where the data touches the end tick,
    // so that no point sits on an axis line.
    auto axis = [](const NiceScale& s, double dlo, double dhi) {
        double span = s.hi - s.lo, near = 0.01 * span, pad = 0.03 * span;
        return std::pair{dlo - s.lo < near ? s.lo - pad : s.lo, s.hi - dhi < near ? s.hi + pad : s.hi};
    };
    std::tie(f.ax0, f.ax1) = axis(f.xs, xlo, xhi);
    std::tie(f.ay0, f.ay1) = axis(f.ys, ylo, yhi);
    return f;
}

// The grid, the axes with their ticks and labels, and "no data" on an empty chart.
std::string axes_svg(const Frame& f, const ChartSpec& spec) {
    const double ml = f.ml, mt = f.mt, pw = f.pw, ph = f.ph;
    std::string o = "<g stroke=\"#e6e6e6\" stroke-width=\"1\">\n";
    for (double t : f.xs.ticks) o += shardlm::format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", f.px(t), mt, f.px(t), mt + ph);
    for (double t : f.ys.ticks) o += shardlm::format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", ml, f.py(t), ml + pw, f.py(t));
    o += "</g>\n<g stroke=\"#333\" stroke-width=\"1\">\n";
    for (double t : f.xs.ticks) o += shardlm::format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", f.px(t), mt + ph, f.px(t), mt + ph + 5);
    for (double t : f.ys.ticks) o += shardlm::format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", ml - 5, f.py(t), ml, f.py(t));
    o += shardlm::format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", ml, mt + ph, ml + pw, mt + ph);
    o += shardlm::format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", ml, mt, ml, mt + ph);
    o += "</g>\n<g fill=\"#444\" font-size=\"11\">\n";
    for (double t : f.xs.ticks)
        o += shardlm::format("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", f.px(t), mt + ph + 18) + format_tick(t, f.xs.step) + "</text>\n";
    for (double t : f.ys.ticks)
        o += shardlm::format("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">", ml - 8, f.py(t) + 4) + format_tick(t, f.ys.step) + "</text>\n";
    o += "</g>\n";
    o += shardlm::format("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#222\">", ml + pw / 2, f.H - 10) +
         xml_escape(spec.x_label) + "</text>\n";
    o += shardlm::format("<text x=\"16\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#222\" transform=\"rotate(-90 16 %.1f)\">",
             mt + ph / 2, mt + ph / 2) + xml_escape(spec.y_label) + "</text>\n";
    if (f.empty)
        o += shardlm::format("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#888\">no data</text>\n", ml + pw / 2, mt + ph / 2);
    return o;
}

// One series, clipped to the plot: its line and, where asked (or for a lone point of a line), its dots.
std::string series_svg(const Frame& f, const ChartSeries& s, const std::vector<Pt>& pts, const std::string& color,
                       const std::string& id) {
    std::string o = "<g clip-path=\"url(#" + id + "-plot)\">\n";
    if (s.line && !pts.empty()) {
        o += "<polyline fill=\"none\" stroke=\"" + xml_escape(color) + "\" stroke-width=\"1.5\" stroke-linejoin=\"round\" points=\"";
        for (size_t k = 0; k < pts.size(); k++) o += shardlm::format(k ? " %.1f,%.1f" : "%.1f,%.1f", f.px(pts[k].x), f.py(pts[k].y));
        o += "\"/>\n";
    }
    // A lone point of a line series gets a dot, or it would not show at all.
    if (s.markers || (s.line && pts.size() == 1)) {
        o += "<g fill=\"" + xml_escape(color) + "\" stroke=\"#fff\" stroke-width=\"0.8\">\n";
        for (const Pt& p : pts) o += shardlm::format("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.2\"/>\n", f.px(p.x), f.py(p.y));
        o += "</g>\n";
    }
    return o + "</g>\n";
}

// The legend, right-aligned in the header band so that it never covers the data ("" when no series is named).
std::string legend_svg(const Frame& f, const ChartSpec& spec, const std::vector<std::string>& colors) {
    if (std::none_of(spec.series.begin(), spec.series.end(), [](const ChartSeries& s) { return !s.name.empty(); })) return "";
    double x = f.W - f.mr;
    std::string items;
    for (size_t i = spec.series.size(); i-- > 0;) {
        const ChartSeries& s = spec.series[i];
        double tw = 7.0 * double(s.name.size());  // rough width of 12px sans-serif text
        x -= tw;
        std::string item = shardlm::format("<text x=\"%.1f\" y=\"28\" fill=\"#222\">", x) + xml_escape(s.name) + "</text>\n";
        x -= 26;
        item += shardlm::format("<line x1=\"%.1f\" y1=\"24\" x2=\"%.1f\" y2=\"24\" stroke=\"%s\" stroke-width=\"%s\"/>\n", x, x + 20,
                    xml_escape(colors[i]).c_str(), s.line ? "2" : "0");
        if (s.markers)
            item += shardlm::format("<circle cx=\"%.1f\" cy=\"24\" r=\"3.2\" fill=\"%s\"/>\n", x + 10, xml_escape(colors[i]).c_str());
        x -= 14;
        items = item + items;
    }
    return "<g font-size=\"12\">\n" + items + "</g>\n";
}

}  // namespace

std::string svg_line_chart(const ChartSpec& spec) {
    const std::string id = (spec.id.empty() ? slug(spec.title) : slug(spec.id));
    std::vector<std::vector<Pt>> pts;
    for (const auto& s : spec.series) pts.push_back(chart_points(s, spec.max_points));
    const Frame f = frame_of(spec, pts);
    const double W = f.W, H = f.H;
    std::string o;
    o += shardlm::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" viewBox=\"0 0 %g %g\" ", W, H, W, H);
    o += "font-family=\"sans-serif\" font-size=\"12\" role=\"img\">\n";
    o += "<title>" + xml_escape(spec.title) + "</title>\n";
    o += shardlm::format("<rect x=\"0\" y=\"0\" width=\"%g\" height=\"%g\" fill=\"#ffffff\"/>\n", W, H);
    o += shardlm::format("<clipPath id=\"%s-plot\"><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/></clipPath>\n",
             id.c_str(), f.ml - 4, f.mt - 4, f.pw + 8, f.ph + 8);
    o += shardlm::format("<text x=\"%.1f\" y=\"24\" font-size=\"15\" font-weight=\"bold\" fill=\"#222\">", f.ml) +
         xml_escape(spec.title) + "</text>\n";
    o += axes_svg(f, spec);
    std::vector<std::string> colors;
    for (size_t i = 0; i < spec.series.size(); i++) {
        const ChartSeries& s = spec.series[i];
        colors.push_back(s.color.empty() ? kPalette[i % std::size(kPalette)] : s.color);
        o += series_svg(f, s, pts[i], colors.back(), id);
    }
    return o + legend_svg(f, spec, colors) + "</svg>\n";
}

}  // namespace shardlm::train
