// train/report.cpp: metrics.jsonl -> SVG curves + report.html. The SVG is written by hand: a
// title, a legend in the header band above the plot, a plot area with light grid lines, axes
// with 1-2-5 ticks, and one polyline per series (clipped to the plot area).
#include "shardlm/train/report.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string_view>

#include "shardlm/core/check.h"
#include "shardlm/io/atomic_file.h"

namespace shardlm::train {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

constexpr double kNaN = MetricsRow::kNaN;

// printf writes a diverged loss as `nan`, `-nan` or `inf`, which is not JSON. Outside strings,
// replace such bare tokens (any case, also NaN / Infinity) with `null` so that the line parses.
std::string nan_tokens_to_null(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    bool in_string = false;
    auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    auto word_at = [&](size_t i, std::string_view w) {
        if (i + w.size() > s.size()) return false;
        for (size_t k = 0; k < w.size(); k++)
            if (std::tolower(static_cast<unsigned char>(s[i + k])) != w[k]) return false;
        return i + w.size() == s.size() || !ident(s[i + w.size()]);
    };
    for (size_t i = 0; i < s.size(); i++) {
        char c = s[i];
        if (in_string) {
            out += c;
            if (c == '\\' && i + 1 < s.size()) out += s[++i];
            else if (c == '"') in_string = false;
            continue;
        }
        if (c == '"') {
            in_string = true;
            out += c;
            continue;
        }
        bool boundary = i == 0 || !ident(s[i - 1]);
        if (boundary && (c == '-' || c == '+' || std::isalpha(static_cast<unsigned char>(c)))) {
            size_t j = (c == '-' || c == '+') ? i + 1 : i;
            for (std::string_view w : {"infinity", "nan", "inf"}) {
                if (word_at(j, w)) {
                    out += "null";
                    i = j + w.size() - 1;
                    goto next;
                }
            }
        }
        out += c;
    next:;
    }
    return out;
}

// The number under `key`: NaN when absent or null; anything else but a number is an error.
double number_field(const json& row, const char* key, const std::string& path, size_t line_no) {
    auto it = row.find(key);
    if (it == row.end() || it->is_null()) return kNaN;
    SHARDLM_CHECK(it->is_number(), "metrics file '", path, "' line ", line_no, ": field '", key,
                  "' is ", it->dump(), ", not a number\n---> HINT: fix or delete that line");
    return it->get<double>();
}

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

template <typename... Args>
std::string fmt(const char* f, Args... args) {
    char buf[256];
    std::snprintf(buf, sizeof(buf), f, args...);
    return buf;
}

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

// --- report.html helpers ---

std::string fmt_num(double v, const char* f = "%.4f") {
    return std::isfinite(v) ? fmt(f, v) : std::string("&mdash;");
}

std::string json_value_text(const ordered_json& v) {
    return v.is_string() ? v.get<std::string>() : v.dump();
}

ordered_json read_json_object(const std::string& path) {
    ordered_json j;
    try {
        j = ordered_json::parse(nan_tokens_to_null(io::read_file(path)));
    } catch (const ordered_json::exception& e) {
        fail("'", path, "' is not valid JSON: ", e.what(), "\n---> HINT: fix the file or move it out of the run directory");
    }
    SHARDLM_CHECK(j.is_object(), "'", path, "' holds ", j.type_name(),
                  ", not a JSON object\n---> HINT: it should be a flat object like {\"model\": \"small\", \"steps\": 2000}");
    return j;
}

std::string kv_table(const ordered_json& obj, std::string_view skip_key = {}) {
    std::string h = "<table class=\"kv\">\n";
    for (const auto& [k, v] : obj.items()) {
        if (k == skip_key) continue;
        h += "<tr><th>" + xml_escape(k) + "</th><td>" + xml_escape(json_value_text(v)) + "</td></tr>\n";
    }
    return h + "</table>\n";
}

std::string duration_text(double seconds) {
    if (!std::isfinite(seconds)) return "&mdash;";
    long long s = std::llround(seconds);
    std::string hms = s >= 3600   ? fmt("%lldh %02lldm %02llds", s / 3600, s / 60 % 60, s % 60)
                      : s >= 60   ? fmt("%lldm %02llds", s / 60, s % 60)
                                  : fmt("%.1fs", seconds);
    return s >= 60 ? fmt("%.1f s", seconds) + " (" + hms + ")" : hms;
}

}  // namespace

// --- metrics.jsonl ---

std::vector<MetricsRow> read_metrics(const std::string& path) {
    std::string text = io::read_file(path);
    std::map<int64_t, MetricsRow> by_step;
    size_t pos = 0, line_no = 0;
    while (pos < text.size()) {
        size_t end = text.find('\n', pos);
        if (end == std::string::npos) end = text.size();
        std::string_view line(text.data() + pos, end - pos);
        pos = end + 1;
        line_no++;
        while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.remove_suffix(1);
        while (!line.empty() && std::isspace(static_cast<unsigned char>(line.front()))) line.remove_prefix(1);
        if (line.empty()) continue;

        json row;
        try {
            row = json::parse(nan_tokens_to_null(line));
        } catch (const json::parse_error& e) {
            // nlohmann says "[json.exception.parse_error.101] parse error at line 1, column 18: why".
            std::string why = e.what();
            size_t colon = why.find(": ");
            why = colon == std::string::npos ? why : why.substr(colon + 2);
            fail("metrics file '", path, "' line ", line_no, ", column ", e.byte, ": not valid JSON (", why,
                 ")\n---> HINT: every line must be one object like {\"step\": 0, \"loss\": 10.9, ...}; fix or delete that line");
        }
        SHARDLM_CHECK(row.is_object(), "metrics file '", path, "' line ", line_no, ": a JSON ", row.type_name(),
                      ", not an object\n---> HINT: every line must be one object like {\"step\": 0, \"loss\": 10.9, ...}");
        auto st = row.find("step");
        SHARDLM_CHECK(st != row.end(), "metrics file '", path, "' line ", line_no,
                      ": no 'step' field\n---> HINT: every line needs the 0-based step it belongs to");
        bool integral = st->is_number_integer() ||
                        (st->is_number_float() && std::floor(st->get<double>()) == st->get<double>());
        SHARDLM_CHECK(integral && st->get<double>() >= 0 && st->get<double>() < 9e15, "metrics file '", path,
                      "' line ", line_no, ": 'step' is ", st->dump(), ", not a step number (an integer >= 0)");
        int64_t step = st->is_number_float() ? int64_t(st->get<double>()) : st->get<int64_t>();

        bool has_loss = row.contains("loss"), has_val = row.contains("val_loss");
        if (!has_loss && !has_val) continue;  // some other event of that step
        double val = number_field(row, "val_loss", path, line_no);
        MetricsRow& r = by_step[step];
        r.step = step;
        if (has_loss) {
            r.has_train = true;
            r.loss = number_field(row, "loss", path, line_no);
            r.grad_norm = number_field(row, "grad_norm", path, line_no);
            r.lr = number_field(row, "lr", path, line_no);
            r.step_ms = number_field(row, "step_ms", path, line_no);
            r.tokens_per_s = number_field(row, "tokens_per_s", path, line_no);
            r.val_loss = val;  // a re-run step drops the val loss of the run it replaces
        } else {
            r.val_loss = val;
        }
    }
    std::vector<MetricsRow> rows;
    rows.reserve(by_step.size());
    for (auto& [step, r] : by_step) rows.push_back(r);
    return rows;
}

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
        return fmt("%.*f", decimals(step / scale), v / scale) + unit;
    }
    if (step < 1e-3) {
        int digits = std::max(0, int(std::floor(std::log10(std::fabs(v)) + 1e-9) - std::floor(std::log10(step) + 1e-9)));
        std::string s = fmt("%.*e", digits, v);  // "1.2e-03"
        size_t e = s.find('e');
        std::string mant = s.substr(0, e), ex = s.substr(e + 1);
        bool neg = ex[0] == '-';
        size_t k = 1;
        while (k + 1 < ex.size() && ex[k] == '0') k++;
        return mant + "e" + (neg ? "-" : "") + ex.substr(k);
    }
    return fmt("%.*f", decimals(step), v);
}

// --- SVG ---

std::string svg_line_chart(const ChartSpec& spec) {
    const double W = std::max(spec.width, 200), H = std::max(spec.height, 150);
    const double ml = 74, mr = 22, mt = 46, mb = 52;  // margins around the plot area
    const double pw = W - ml - mr, ph = H - mt - mb;
    const std::string id = (spec.id.empty() ? slug(spec.title) : slug(spec.id));

    std::vector<std::vector<Pt>> pts;
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    for (const auto& s : spec.series) {
        pts.push_back(chart_points(s, spec.max_points));
        for (const Pt& p : pts.back()) {
            xlo = std::min(xlo, p.x), xhi = std::max(xhi, p.x);
            ylo = std::min(ylo, p.y), yhi = std::max(yhi, p.y);
        }
    }
    bool empty = !(xlo <= xhi);
    if (empty) xlo = 0, xhi = 1, ylo = 0, yhi = 1;
    if (spec.x_integer && xhi - xlo < 5) xhi = xlo + 5;  // a short run: ticks 0, 1, ..., 5 (not 0.2, 0.4)
    NiceScale xs = nice_scale(xlo, xhi, 8), ys = nice_scale(ylo, yhi, 6);
    // The axes span the ticks, plus a little room on a side where the data touches the end tick,
    // so that no point sits on an axis line.
    auto axis = [](const NiceScale& s, double dlo, double dhi) {
        double span = s.hi - s.lo, near = 0.01 * span, pad = 0.03 * span;
        return std::pair{dlo - s.lo < near ? s.lo - pad : s.lo, s.hi - dhi < near ? s.hi + pad : s.hi};
    };
    const auto [ax0, ax1] = axis(xs, xlo, xhi);
    const auto [ay0, ay1] = axis(ys, ylo, yhi);
    auto px = [&](double x) { return ml + (x - ax0) / (ax1 - ax0) * pw; };
    auto py = [&](double y) { return mt + ph - (y - ay0) / (ay1 - ay0) * ph; };

    std::string o;
    o += fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" viewBox=\"0 0 %g %g\" ", W, H, W, H);
    o += "font-family=\"sans-serif\" font-size=\"12\" role=\"img\">\n";
    o += "<title>" + xml_escape(spec.title) + "</title>\n";
    o += fmt("<rect x=\"0\" y=\"0\" width=\"%g\" height=\"%g\" fill=\"#ffffff\"/>\n", W, H);
    o += fmt("<clipPath id=\"%s-plot\"><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/></clipPath>\n",
             id.c_str(), ml - 4, mt - 4, pw + 8, ph + 8);
    o += fmt("<text x=\"%.1f\" y=\"24\" font-size=\"15\" font-weight=\"bold\" fill=\"#222\">", ml) +
         xml_escape(spec.title) + "</text>\n";

    // Grid and tick labels.
    o += "<g stroke=\"#e6e6e6\" stroke-width=\"1\">\n";
    for (double t : xs.ticks) o += fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", px(t), mt, px(t), mt + ph);
    for (double t : ys.ticks) o += fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", ml, py(t), ml + pw, py(t));
    o += "</g>\n<g stroke=\"#333\" stroke-width=\"1\">\n";
    for (double t : xs.ticks) o += fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", px(t), mt + ph, px(t), mt + ph + 5);
    for (double t : ys.ticks) o += fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", ml - 5, py(t), ml, py(t));
    o += fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", ml, mt + ph, ml + pw, mt + ph);
    o += fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", ml, mt, ml, mt + ph);
    o += "</g>\n<g fill=\"#444\" font-size=\"11\">\n";
    for (double t : xs.ticks)
        o += fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", px(t), mt + ph + 18) + format_tick(t, xs.step) + "</text>\n";
    for (double t : ys.ticks)
        o += fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">", ml - 8, py(t) + 4) + format_tick(t, ys.step) + "</text>\n";
    o += "</g>\n";
    o += fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#222\">", ml + pw / 2, H - 10) +
         xml_escape(spec.x_label) + "</text>\n";
    o += fmt("<text x=\"16\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#222\" transform=\"rotate(-90 16 %.1f)\">",
             mt + ph / 2, mt + ph / 2) + xml_escape(spec.y_label) + "</text>\n";
    if (empty)
        o += fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#888\">no data</text>\n", ml + pw / 2, mt + ph / 2);

    // Series.
    std::vector<std::string> colors;
    for (size_t i = 0; i < spec.series.size(); i++) {
        const ChartSeries& s = spec.series[i];
        colors.push_back(s.color.empty() ? kPalette[i % std::size(kPalette)] : s.color);
        const std::string& c = colors.back();
        o += "<g clip-path=\"url(#" + id + "-plot)\">\n";
        if (s.line && !pts[i].empty()) {
            o += "<polyline fill=\"none\" stroke=\"" + xml_escape(c) +
                 "\" stroke-width=\"1.5\" stroke-linejoin=\"round\" points=\"";
            for (size_t k = 0; k < pts[i].size(); k++)
                o += fmt(k ? " %.1f,%.1f" : "%.1f,%.1f", px(pts[i][k].x), py(pts[i][k].y));
            o += "\"/>\n";
        }
        // A lone point of a line series gets a dot, or it would not show at all.
        if (s.markers || (s.line && pts[i].size() == 1)) {
            o += "<g fill=\"" + xml_escape(c) + "\" stroke=\"#fff\" stroke-width=\"0.8\">\n";
            for (const Pt& p : pts[i]) o += fmt("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.2\"/>\n", px(p.x), py(p.y));
            o += "</g>\n";
        }
        o += "</g>\n";
    }

    // Legend: right-aligned in the header band, so it never covers the data.
    bool named = std::any_of(spec.series.begin(), spec.series.end(), [](const ChartSeries& s) { return !s.name.empty(); });
    if (named) {
        double x = W - mr;
        std::string items;
        for (size_t i = spec.series.size(); i-- > 0;) {
            const ChartSeries& s = spec.series[i];
            double tw = 7.0 * double(s.name.size());  // rough width of 12px sans-serif text
            x -= tw;
            std::string item = fmt("<text x=\"%.1f\" y=\"28\" fill=\"#222\">", x) + xml_escape(s.name) + "</text>\n";
            x -= 26;
            item += fmt("<line x1=\"%.1f\" y1=\"24\" x2=\"%.1f\" y2=\"24\" stroke=\"%s\" stroke-width=\"%s\"/>\n", x, x + 20,
                        xml_escape(colors[i]).c_str(), s.line ? "2" : "0");
            if (s.markers)
                item += fmt("<circle cx=\"%.1f\" cy=\"24\" r=\"3.2\" fill=\"%s\"/>\n", x + 10, xml_escape(colors[i]).c_str());
            x -= 14;
            items = item + items;
        }
        o += "<g font-size=\"12\">\n" + items + "</g>\n";
    }
    o += "</svg>\n";
    return o;
}

// --- report ---

std::vector<std::string> write_report(const std::string& run_dir) {
    SHARDLM_CHECK(fs::is_directory(run_dir), "report: run directory '", run_dir,
                  "' does not exist\n---> HINT: pass the --out directory of a `shardlm train` run");
    const fs::path dir(run_dir);
    const std::string metrics_path = (dir / "metrics.jsonl").string();
    SHARDLM_CHECK(fs::exists(metrics_path), "report: no metrics.jsonl in '", run_dir,
                  "'\n---> HINT: pass the --out directory of a `shardlm train` run (it writes RUN_DIR/metrics.jsonl)");
    std::vector<MetricsRow> rows = read_metrics(metrics_path);
    SHARDLM_CHECK(!rows.empty(), "report: '", metrics_path,
                  "' has no metrics rows\n---> HINT: the run has not finished a step yet; try again later");

    std::vector<double> step, loss, lr, gn, tps, vstep, vloss;
    const MetricsRow* last = nullptr;
    const MetricsRow *last_val = nullptr, *best_val = nullptr;
    double train_ms = 0;
    std::vector<const MetricsRow*> train_rows;
    for (const MetricsRow& r : rows) {
        if (r.has_train) {
            step.push_back(double(r.step));
            loss.push_back(r.loss), lr.push_back(r.lr), gn.push_back(r.grad_norm), tps.push_back(r.tokens_per_s);
            if (std::isfinite(r.step_ms)) train_ms += r.step_ms;
            last = &r;
            train_rows.push_back(&r);
        }
        if (std::isfinite(r.val_loss)) {
            vstep.push_back(double(r.step)), vloss.push_back(r.val_loss);
            last_val = &r;
            if (!best_val || r.val_loss < best_val->val_loss) best_val = &r;
        }
    }
    double tps_sum = 0;
    size_t tps_n = 0, tail = (train_rows.size() + 4) / 5;  // last 20% of the train steps, at least one
    for (size_t i = train_rows.size() - tail; i < train_rows.size(); i++)
        if (std::isfinite(train_rows[i]->tokens_per_s)) tps_sum += train_rows[i]->tokens_per_s, tps_n++;
    double tps_mean = tps_n ? tps_sum / double(tps_n) : kNaN;

    // Charts.
    auto one = [&](const char* id, const char* title, const char* ylabel, const std::vector<double>& y) {
        ChartSpec c;
        c.id = id, c.title = title, c.x_label = "step", c.y_label = ylabel;
        c.x_integer = true;
        c.series.push_back({"", step, y, "", true, false});  // one unnamed series: no legend
        return c;
    };
    ChartSpec loss_chart = one("loss", "Loss", "loss", loss);
    loss_chart.series[0].name = "train";
    if (!vstep.empty()) loss_chart.series.push_back({"val", vstep, vloss, "#ff7f0e", true, true});
    if (step.empty()) loss_chart.series.erase(loss_chart.series.begin());
    struct Out {
        const char* file;
        ChartSpec spec;
    };
    std::vector<Out> charts = {
        {"loss.svg", loss_chart},
        {"tokens_per_s.svg", one("tokens-per-s", "Throughput", "tokens/s", tps)},
        {"lr.svg", one("lr", "Learning rate", "learning rate", lr)},
        {"grad_norm.svg", one("grad-norm", "Gradient norm", "grad norm", gn)},
    };
    charts[1].spec.series[0].color = "#2ca02c";
    charts[2].spec.series[0].color = "#9467bd";
    charts[3].spec.series[0].color = "#d62728";

    std::vector<std::string> written;
    std::string plots;
    for (const Out& c : charts) {
        std::string svg = svg_line_chart(c.spec);
        std::string path = (dir / c.file).string();
        io::write_file_atomic(path, svg);
        written.push_back(path);
        plots += "<figure>\n" + svg + "</figure>\n";
    }

    // Optional files.
    ordered_json config, summary;
    bool has_config = fs::exists(dir / "config.json"), has_summary = fs::exists(dir / "summary.json");
    if (has_config) config = read_json_object((dir / "config.json").string());
    if (has_summary) summary = read_json_object((dir / "summary.json").string());

    std::string name = fs::absolute(dir).lexically_normal().string();
    while (name.size() > 1 && name.back() == '/') name.pop_back();
    name = fs::path(name).filename().string();

    auto row = [](const std::string& k, const std::string& v) { return "<tr><th>" + k + "</th><td>" + v + "</td></tr>\n"; };
    std::string numbers = "<table class=\"kv\">\n";
    numbers += row("last step", last ? fmt("%lld", (long long)last->step) : "&mdash;");
    numbers += row("last train loss", last ? fmt_num(last->loss) : "&mdash;");
    numbers += row("last val loss", last_val ? fmt_num(last_val->val_loss) + fmt(" (step %lld)", (long long)last_val->step)
                                             : "&mdash;");
    numbers += row("best val loss", best_val ? fmt_num(best_val->val_loss) + fmt(" (step %lld)", (long long)best_val->step)
                                             : "&mdash;");
    numbers += row("last learning rate", last ? fmt_num(last->lr, "%.4g") : "&mdash;");
    numbers += row("mean tokens/s, last 20% of steps", fmt_num(tps_mean, "%.0f"));
    numbers += row("total train time (sum of step_ms)", train_rows.empty() ? "&mdash;" : duration_text(train_ms / 1e3));
    numbers += row("train steps logged", fmt("%zu", train_rows.size()));
    numbers += "</table>\n";

    std::string h;
    h += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
    h += "<title>shardlm run: " + xml_escape(name) + "</title>\n";
    h += "<style>\n"
         "body{font-family:sans-serif;color:#222;max-width:1480px;margin:24px auto;padding:0 16px}\n"
         "h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd;padding-bottom:4px}\n"
         "table.kv{border-collapse:collapse;font-size:14px}\n"
         "table.kv th,table.kv td{border:1px solid #ddd;padding:4px 12px;text-align:left;vertical-align:top}\n"
         "table.kv th{background:#f6f6f6;font-weight:normal;color:#555}\n"
         ".plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:12px}\n"
         ".plots figure{margin:0;border:1px solid #eee}.plots svg{display:block;width:100%;height:auto}\n"
         "pre{background:#f6f6f6;padding:12px;white-space:pre-wrap;word-wrap:break-word;font-size:13px}\n"
         ".dir{color:#777;font-size:13px}\n"
         "</style>\n</head>\n<body>\n";
    h += "<h1>shardlm run: " + xml_escape(name) + "</h1>\n";
    h += "<p class=\"dir\">" + xml_escape(fs::absolute(dir).lexically_normal().string()) + "</p>\n";
    h += "<h2>Final numbers</h2>\n" + numbers;
    h += "<h2>Curves</h2>\n<div class=\"plots\">\n" + plots + "</div>\n";
    if (has_summary) {
        h += "<h2>Summary</h2>\n" + kv_table(summary, "sample");
        if (summary.contains("sample"))
            h += "<h3>Sample</h3>\n<pre>" + xml_escape(json_value_text(summary["sample"])) + "</pre>\n";
    }
    h += "<h2>Config</h2>\n";
    h += has_config ? kv_table(config) : std::string("<p>no config.json in the run directory</p>\n");
    h += "</body>\n</html>\n";
    std::string html_path = (dir / "report.html").string();
    io::write_file_atomic(html_path, h);
    written.push_back(html_path);
    return written;
}

}  // namespace shardlm::train
