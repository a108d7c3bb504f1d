// train/report.cpp: metrics.jsonl -> SVG curves (train/svg_chart.h) + report.html.
#include "shardlm/train/report.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <string_view>

#include "shardlm/core/check.h"
#include "shardlm/core/format.h"
#include "shardlm/io/atomic_file.h"
#include "shardlm/train/train_config.h"

namespace shardlm::train {

using detail::xml_escape;

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

// --- report.html helpers ---

std::string fmt_num(double v, const char* f = "%.4f") {
    return std::isfinite(v) ? shardlm::format(f, v) : std::string("&mdash;");
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

std::string kv_table(const ordered_json& obj) {
    std::string h = "<table class=\"kv\">\n";
    for (const auto& [k, v] : obj.items()) {
        h += "<tr><th>" + xml_escape(k) + "</th><td>" + xml_escape(json_value_text(v)) + "</td></tr>\n";
    }
    return h + "</table>\n";
}

// A summary's number as a user reads it: losses and entropies to 4 decimals, seconds as a duration, counts
// as integers (4096000, not 4096000.0), anything else in 6 significant digits.
std::string summary_value_text(const std::string& key, const ordered_json& v);

// The settings of config.json as the user wrote them, a default shown as the value it resolves to (marked);
// a config.json this build cannot read (an older run's keys) is shown as it is.
std::string settings_table(const ordered_json& config, const std::string& path) {
    TrainConfig c;
    try {
        apply_config_json(c, json::parse(config.dump()), path);
    } catch (const std::exception&) {
        return kv_table(config);
    }
    std::string h = "<table class=\"kv\">\n";
    for (const SettingText& s : settings_text(c)) {
        if (!config.contains(s.key)) continue;
        h += "<tr><th>" + xml_escape(s.key) + "</th><td>" + xml_escape(s.text) +
             (s.resolved ? " <span class=\"dflt\">(default)</span>" : "") + "</td></tr>\n";
    }
    return h + "</table>\n";
}

std::string summary_table(const ordered_json& summary) {
    std::string h = "<table class=\"kv\">\n";
    for (const auto& [k, v] : summary.items()) {
        if (k == "sample") continue;
        h += "<tr><th>" + xml_escape(k) + "</th><td>" + xml_escape(summary_value_text(k, v)) + "</td></tr>\n";
    }
    return h + "</table>\n";
}

std::string duration_text(double seconds) {
    if (!std::isfinite(seconds)) return "&mdash;";
    long long s = std::llround(seconds);
    std::string hms = s >= 3600   ? shardlm::format("%lldh %02lldm %02llds", s / 3600, s / 60 % 60, s % 60)
                      : s >= 60   ? shardlm::format("%lldm %02llds", s / 60, s % 60)
                                  : shardlm::format("%.1fs", seconds);
    return s >= 60 ? shardlm::format("%.1f s", seconds) + " (" + hms + ")" : hms;
}

std::string summary_value_text(const std::string& key, const ordered_json& v) {
    if (!v.is_number()) return json_value_text(v);
    const double x = v.get<double>();
    const auto ends_with = [&](std::string_view tail) { return key.size() >= tail.size() && key.ends_with(tail); };
    if (key.find("loss") != std::string::npos || key.find("entropy") != std::string::npos) return fmt_num(x);
    if (ends_with("_s")) return duration_text(x);
    if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 1e15) return shardlm::format("%lld", (long long)x);
    return fmt_num(x, "%.6g");
}

}  // namespace

// --- metrics.jsonl ---

namespace {

// The largest expert's share over a row's "moe_load" layers (NaN without them).
double largest_load(const json& row, const std::string& path, size_t line_no) {
    auto it = row.find("moe_load");
    if (it == row.end()) return MetricsRow::kNaN;
    SHARDLM_CHECK(it->is_array(), "metrics file '", path, "' line ", line_no, ": 'moe_load' is ", it->type_name(),
                  ", not an array\n---> HINT: one object per MoE layer, like {\"layer\": 0, \"max\": 0.3, ...}");
    double m = MetricsRow::kNaN;
    for (const auto& l : *it)
        if (l.is_object() && l.contains("max") && l["max"].is_number())
            m = std::isnan(m) ? l["max"].get<double>() : std::max(m, l["max"].get<double>());
    return m;
}

}  // namespace

namespace {
// A row's "health" (train/health.h): its unit names and per-unit lists (null -> NaN); anything else is ignored.
void read_health(const json& row, MetricsRow& r) {
    const auto h = row.find("health");
    r.units.clear(), r.unit_grad_norm.clear(), r.update_ratio.clear(), r.act_rms.clear();
    if (h == row.end() || !h->is_object() || !h->contains("units") || !(*h)["units"].is_array()) return;
    for (const json& n : (*h)["units"]) r.units.push_back(n.is_string() ? n.get<std::string>() : n.dump());
    auto list = [&](const char* key, std::vector<double>& out) {
        out.assign(r.units.size(), MetricsRow::kNaN);
        if (!h->contains(key) || !(*h)[key].is_array()) return;
        for (size_t u = 0; u < out.size() && u < (*h)[key].size(); u++)
            if ((*h)[key][u].is_number()) out[u] = (*h)[key][u].get<double>();
    };
    list("grad_norm", r.unit_grad_norm), list("update_ratio", r.update_ratio), list("act_rms", r.act_rms);
}
}  // namespace

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
            r.aux_loss = number_field(row, "aux_loss", path, line_no);
            r.load_max = largest_load(row, path, line_no);
            read_health(row, r);
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

// --- report ---

namespace {

// What report.html shows of metrics.jsonl: the curves, and the rows the final numbers come from.
struct Curves {
    std::vector<double> step, loss, lr, grad_norm, tokens_per_s, val_step, val_loss;
    std::vector<double> aux_loss, load_max;  // a mixture of experts' (all NaN for a dense model)
    const MetricsRow* health = nullptr;     // the last row with training health (its unit names)
    std::vector<double> health_step;        // the steps of the rows that have it
    std::vector<const MetricsRow*> health_rows;
    const MetricsRow* last = nullptr;  // the last training row
    const MetricsRow *last_val = nullptr, *best_val = nullptr;
    size_t train_steps = 0;
    double train_ms = 0;        // the sum of step_ms
    double tokens_per_s_tail = kNaN;  // the mean over the last 20 % of the training steps
};

Curves collect_curves(const std::vector<MetricsRow>& rows) {
    Curves c;
    std::vector<const MetricsRow*> train_rows;
    for (const MetricsRow& r : rows) {
        if (r.has_train) {
            c.step.push_back(double(r.step));
            c.loss.push_back(r.loss), c.lr.push_back(r.lr), c.grad_norm.push_back(r.grad_norm);
            c.tokens_per_s.push_back(r.tokens_per_s);
            c.aux_loss.push_back(r.aux_loss), c.load_max.push_back(r.load_max);
            if (std::isfinite(r.step_ms)) c.train_ms += r.step_ms;
            c.last = &r;
            train_rows.push_back(&r);
            if (!r.units.empty()) c.health = &r, c.health_step.push_back(double(r.step)), c.health_rows.push_back(&r);
        }
        if (std::isfinite(r.val_loss)) {
            c.val_step.push_back(double(r.step)), c.val_loss.push_back(r.val_loss);
            c.last_val = &r;
            if (!c.best_val || r.val_loss < c.best_val->val_loss) c.best_val = &r;
        }
    }
    c.train_steps = train_rows.size();
    double sum = 0;
    size_t n = 0, tail = (train_rows.size() + 4) / 5;  // last 20% of the train steps, at least one
    for (size_t i = train_rows.size() - tail; i < train_rows.size(); i++)
        if (std::isfinite(train_rows[i]->tokens_per_s)) sum += train_rows[i]->tokens_per_s, n++;
    if (n) c.tokens_per_s_tail = sum / double(n);
    return c;
}

struct Chart {
    const char* file;
    ChartSpec spec;
};

bool any_finite(const std::vector<double>& v) {
    return std::any_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
}

// Training health: each unit's gradient norm, update-to-parameter ratio and output RMS over the health steps,
// one line per unit: the embedding, the head and at most 6 blocks evenly spread (a deep model's hundred lines
// would be unreadable; metrics.jsonl has them all).
void health_charts(const Curves& c, std::vector<Chart>& out) {
    const std::vector<std::string>& names = c.health->units;
    std::vector<size_t> shown = {0};
    const size_t blocks = names.size() >= 2 ? names.size() - 2 : 0, most = 6;
    for (size_t k = 0; k < std::min(blocks, most); k++) shown.push_back(1 + (blocks <= most ? k : k * (blocks - 1) / (most - 1)));
    if (names.size() >= 2) shown.push_back(names.size() - 1);
    auto chart = [&](const char* id, const char* title, const char* ylabel, std::vector<double> MetricsRow::*field) {
        ChartSpec s;
        s.id = id, s.title = title, s.x_label = "step", s.y_label = ylabel;
        s.x_integer = true;
        for (size_t u : shown) {
            ChartSeries line{names[u], c.health_step, {}, "", true, c.health_step.size() < 30};
            for (const MetricsRow* r : c.health_rows) line.y.push_back(u < (r->*field).size() ? (r->*field)[u] : kNaN);
            if (any_finite(line.y)) s.series.push_back(std::move(line));
        }
        return s;
    };
    out.push_back({"unit_grad_norm.svg", chart("unit-grad-norm", "Gradient norm by unit", "grad norm", &MetricsRow::unit_grad_norm)});
    out.push_back({"update_ratio.svg", chart("update-ratio", "Update / parameter norm by unit", "ratio", &MetricsRow::update_ratio)});
    out.push_back({"act_rms.svg", chart("act-rms", "Output RMS by unit (the residual stream after it)", "RMS", &MetricsRow::act_rms)});
}

// The four charts: loss (train and validation), throughput, learning rate, gradient norm; and for a mixture of
// experts the balance loss and the largest expert's share of its layer's choices.
std::vector<Chart> charts(const Curves& c) {
    auto one = [&](const char* id, const char* title, const char* ylabel, const std::vector<double>& y, const char* color) {
        ChartSpec s;
        s.id = id, s.title = title, s.x_label = "step", s.y_label = ylabel;
        s.x_integer = true;
        s.series.push_back({"", c.step, y, color, true, false});  // one unnamed series: no legend
        return s;
    };
    ChartSpec loss = one("loss", "Loss", "loss", c.loss, "");
    loss.series[0].name = "train";
    if (!c.val_step.empty()) loss.series.push_back({"val", c.val_step, c.val_loss, "#ff7f0e", true, true});
    if (c.step.empty()) loss.series.erase(loss.series.begin());
    std::vector<Chart> out = {{"loss.svg", loss},
                              {"tokens_per_s.svg", one("tokens-per-s", "Throughput", "tokens/s", c.tokens_per_s, "#2ca02c")},
                              {"lr.svg", one("lr", "Learning rate", "learning rate", c.lr, "#9467bd")},
                              {"grad_norm.svg", one("grad-norm", "Gradient norm", "grad norm", c.grad_norm, "#d62728")}};
    if (c.health) health_charts(c, out);
    if (any_finite(c.aux_loss)) {
        out.push_back({"moe_balance.svg", one("moe-balance", "Experts' balance (E sum f P, 1 when even)", "balance",
                                              c.aux_loss, "#8c564b")});
        out.push_back({"moe_load.svg", one("moe-load", "Largest expert's share of its layer's choices", "share",
                                           c.load_max, "#e377c2")});
    }
    return out;
}

std::string final_numbers(const Curves& c) {
    auto row = [](const std::string& k, const std::string& v) { return "<tr><th>" + k + "</th><td>" + v + "</td></tr>\n"; };
    auto at_step = [](const MetricsRow* r) {
        return r ? fmt_num(r->val_loss) + shardlm::format(" (step %lld)", (long long)r->step) : std::string("&mdash;");
    };
    std::string h = "<table class=\"kv\">\n";
    h += row("last step", c.last ? shardlm::format("%lld", (long long)c.last->step) : "&mdash;");
    h += row("last train loss", c.last ? fmt_num(c.last->loss) : "&mdash;");
    h += row("last val loss", at_step(c.last_val));
    h += row("best val loss", at_step(c.best_val));
    h += row("last learning rate", c.last ? fmt_num(c.last->lr, "%.4g") : "&mdash;");
    h += row("mean tokens/s, last 20% of steps", fmt_num(c.tokens_per_s_tail, "%.0f"));
    h += row("total train time (sum of step_ms)", c.train_steps == 0 ? "&mdash;" : duration_text(c.train_ms / 1e3));
    h += row("train steps logged", shardlm::format("%zu", c.train_steps));
    return h + "</table>\n";
}

constexpr const char* kStyle =
    "<style>\n"
    "body{font-family:sans-serif;color:#222;max-width:1480px;margin:24px auto;padding:0 16px}\n"
    "h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd;padding-bottom:4px}\n"
    "table.kv{border-collapse:collapse;font-size:14px}\n"
    "table.kv th,table.kv td{border:1px solid #ddd;padding:4px 12px;text-align:left;vertical-align:top}\n"
    "table.kv th{background:#f6f6f6;font-weight:normal;color:#555}\n"
    ".plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:12px}\n"
    ".plots figure{margin:0;border:1px solid #eee}.plots svg{display:block;width:100%;height:auto}\n"
    "pre{background:#f6f6f6;padding:12px;white-space:pre-wrap;word-wrap:break-word;font-size:13px}\n"
    ".dir{color:#777;font-size:13px}.dflt{color:#999}\n"
    "</style>\n";

// The run's config.json and summary.json, where it has them.
struct RunFiles {
    std::optional<ordered_json> config, summary;
    std::string config_path;
};

RunFiles read_run_files(const fs::path& dir) {
    RunFiles f;
    f.config_path = (dir / "config.json").string();
    if (fs::exists(f.config_path)) f.config = read_json_object(f.config_path);
    if (fs::exists(dir / "summary.json")) f.summary = read_json_object((dir / "summary.json").string());
    return f;
}

std::string html_page(const fs::path& dir, const RunFiles& f, const std::string& numbers, const std::string& plots) {
    std::string name = fs::absolute(dir).lexically_normal().string();
    while (name.size() > 1 && name.back() == '/') name.pop_back();
    name = fs::path(name).filename().string();
    // the run's directory as it was named where the run started (its --out), else as report was given it
    const ordered_json* out = f.config && f.config->contains("out") ? &(*f.config)["out"] : nullptr;
    const std::string where = out && out->is_string() && !out->get<std::string>().empty() ? out->get<std::string>()
                                                                                           : dir.lexically_normal().string();
    std::string h = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
    h += "<title>shardlm run: " + xml_escape(name) + "</title>\n";
    h += std::string(kStyle) + "</head>\n<body>\n";
    h += "<h1>shardlm run: " + xml_escape(name) + "</h1>\n";
    h += "<p class=\"dir\">" + xml_escape(where) + "</p>\n";
    h += "<h2>Final numbers</h2>\n" + numbers;
    h += "<h2>Curves</h2>\n<div class=\"plots\">\n" + plots + "</div>\n";
    if (f.summary) {
        h += "<h2>Summary</h2>\n" + summary_table(*f.summary);
        if (f.summary->contains("sample"))
            h += "<h3>Sample</h3>\n<pre>" + xml_escape(json_value_text((*f.summary)["sample"])) + "</pre>\n";
    }
    h += "<h2>Config</h2>\n";
    h += f.config ? settings_table(*f.config, f.config_path) : std::string("<p>no config.json in the run directory</p>\n");
    return h + "</body>\n</html>\n";
}

}  // namespace

std::vector<std::string> write_report(const std::string& run_dir) {
    SHARDLM_CHECK(fs::is_directory(run_dir), "report: run directory '", run_dir,
                  "' does not exist\n---> HINT: pass the --out directory of a `shardlm train` run");
    const fs::path dir(run_dir);
    const std::string metrics_path = (dir / "metrics.jsonl").string();
    SHARDLM_CHECK(fs::exists(metrics_path), "report: no metrics.jsonl in '", run_dir,
                  "'\n---> HINT: pass the --out directory of a `shardlm train` run (it writes RUN_DIR/metrics.jsonl)");
    const std::vector<MetricsRow> rows = read_metrics(metrics_path);
    SHARDLM_CHECK(!rows.empty(), "report: '", metrics_path,
                  "' has no metrics rows\n---> HINT: the run has not finished a step yet; try again later");
    const Curves curves = collect_curves(rows);
    std::vector<std::string> written;
    std::string plots;
    for (const Chart& c : charts(curves)) {
        const std::string svg = svg_line_chart(c.spec);
        written.push_back((dir / c.file).string());
        io::write_file_atomic(written.back(), svg);
        plots += "<figure>\n" + svg + "</figure>\n";
    }
    const RunFiles files = read_run_files(dir);
    written.push_back((dir / "report.html").string());
    io::write_file_atomic(written.back(), html_page(dir, files, final_numbers(curves), plots));
    return written;
}

}  // namespace shardlm::train
