// Tests for train/report: metrics.jsonl parsing (resume, val-only rows, bad lines), nice ticks,
// the hand-written SVG and the HTML report, all in a temp dir.
#include "shardlm/train/report.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "shardlm/core/check.h"
#include "shardlm/io/atomic_file.h"
#include "shardlm/model/config.h"
#include "shardlm/train/train_config.h"

namespace fs = std::filesystem;
using namespace shardlm::train;

namespace {

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
struct TempDir {
    fs::path dir;
    TempDir() {
        static std::atomic<int> counter{0};
        dir = fs::temp_directory_path() / shardlm::cat("shardlm_test_report_", ::getpid(), "_", counter++);
        fs::create_directories(dir);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(dir, ec);
    }
    std::string file(const std::string& name) const { return (dir / name).string(); }
};

void write_text(const std::string& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << text;
}

std::string train_line(int step, double loss, double lr = 1e-3, double tps = 1000, double ms = 10) {
    return shardlm::cat("{\"step\": ", step, ", \"loss\": ", loss, ", \"grad_norm\": 1.5, \"lr\": ", lr,
                        ", \"step_ms\": ", ms, ", \"tokens_per_s\": ", tps, "}\n");
}

size_t count(const std::string& s, const std::string& what) {
    size_t n = 0;
    for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) n++;
    return n;
}

// The number of "x,y" pairs in the points attribute of the i-th polyline.
size_t polyline_points(const std::string& svg, size_t index = 0) {
    size_t p = 0;
    for (size_t i = 0; i <= index; i++) {
        p = svg.find("<polyline", p);
        if (p == std::string::npos) return 0;
        p += 1;
    }
    size_t a = svg.find("points=\"", p) + 8, b = svg.find('"', a);
    std::string pts = svg.substr(a, b - a);
    return pts.empty() ? 0 : count(pts, " ") + 1;
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const shardlm::Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST(Metrics, ParsesTrainAndValRows) {
    TempDir t;
    std::string text = train_line(0, 10.5) + "\n" + train_line(1, 9.0) +
                       "{\"step\": 1, \"val_loss\": 9.25}\n" +
                       "  \n" + train_line(2, 8.0).substr(0, train_line(2, 8.0).size() - 2) + ", \"val_loss\": 8.5}\n";
    write_text(t.file("metrics.jsonl"), text);
    auto rows = read_metrics(t.file("metrics.jsonl"));
    ASSERT_EQ(rows.size(), 3u);
    EXPECT_EQ(rows[0].step, 0);
    EXPECT_TRUE(rows[0].has_train);
    EXPECT_DOUBLE_EQ(rows[0].loss, 10.5);
    EXPECT_DOUBLE_EQ(rows[0].grad_norm, 1.5);
    EXPECT_DOUBLE_EQ(rows[0].lr, 1e-3);
    EXPECT_DOUBLE_EQ(rows[0].step_ms, 10);
    EXPECT_DOUBLE_EQ(rows[0].tokens_per_s, 1000);
    EXPECT_TRUE(std::isnan(rows[0].val_loss));
    // A val-only line keeps the train numbers of its step.
    EXPECT_DOUBLE_EQ(rows[1].loss, 9.0);
    EXPECT_DOUBLE_EQ(rows[1].val_loss, 9.25);
    EXPECT_DOUBLE_EQ(rows[2].loss, 8.0);
    EXPECT_DOUBLE_EQ(rows[2].val_loss, 8.5);
}

TEST(Metrics, RepeatedStepsAfterResumeLastWins) {
    TempDir t;
    // Run killed after step 4 (val at 3), resumed from a checkpoint at step 2: steps 3, 4 re-written.
    std::string text;
    for (int s = 0; s <= 4; s++) text += train_line(s, 10 - s);
    text += "{\"step\": 3, \"val_loss\": 7.7}\n";
    for (int s = 3; s <= 5; s++) text += train_line(s, 100 + s);
    text += "{\"step\": 5, \"val_loss\": 95.0}\n";
    write_text(t.file("metrics.jsonl"), text);
    auto rows = read_metrics(t.file("metrics.jsonl"));
    ASSERT_EQ(rows.size(), 6u);
    for (int s = 0; s <= 5; s++) EXPECT_EQ(rows[s].step, s);
    EXPECT_DOUBLE_EQ(rows[2].loss, 8);
    EXPECT_DOUBLE_EQ(rows[3].loss, 103);
    EXPECT_DOUBLE_EQ(rows[4].loss, 104);
    EXPECT_DOUBLE_EQ(rows[5].loss, 105);
    // The val loss of the replaced step 3 went with it; step 5 has the new one.
    EXPECT_TRUE(std::isnan(rows[3].val_loss));
    EXPECT_DOUBLE_EQ(rows[5].val_loss, 95.0);
}

TEST(Metrics, ValOnlyRowsAndUnorderedSteps) {
    TempDir t;
    write_text(t.file("metrics.jsonl"),
               "{\"step\": 10, \"val_loss\": 3.5}\n" + train_line(2, 4.0) + "{\"step\": 0, \"val_loss\": 5.0}\r\n");
    auto rows = read_metrics(t.file("metrics.jsonl"));
    ASSERT_EQ(rows.size(), 3u);
    EXPECT_EQ(rows[0].step, 0);
    EXPECT_FALSE(rows[0].has_train);
    EXPECT_TRUE(std::isnan(rows[0].loss));
    EXPECT_DOUBLE_EQ(rows[0].val_loss, 5.0);
    EXPECT_EQ(rows[1].step, 2);
    EXPECT_EQ(rows[2].step, 10);
    EXPECT_DOUBLE_EQ(rows[2].val_loss, 3.5);
}

TEST(Metrics, NanAndInfTokensReadAsNaN) {
    TempDir t;
    write_text(t.file("metrics.jsonl"),
               "{\"step\": 0, \"loss\": nan, \"grad_norm\": inf, \"lr\": -nan, \"step_ms\": null, \"tokens_per_s\": 5}\n"
               "{\"step\": 1, \"loss\": 2, \"note\": \"inf nan\"}\n");
    auto rows = read_metrics(t.file("metrics.jsonl"));
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_TRUE(std::isnan(rows[0].loss));
    EXPECT_TRUE(std::isnan(rows[0].grad_norm));
    EXPECT_TRUE(std::isnan(rows[0].lr));
    EXPECT_TRUE(std::isnan(rows[0].step_ms));
    EXPECT_DOUBLE_EQ(rows[0].tokens_per_s, 5);
    EXPECT_DOUBLE_EQ(rows[1].loss, 2);
}

TEST(Metrics, MalformedLineNamesFileAndLine) {
    TempDir t;
    std::string path = t.file("metrics.jsonl");
    write_text(path, train_line(0, 3) + "\n" + "{\"step\": 1, \"loss\": 2.5,\n" + train_line(2, 2));
    std::string e = error_of([&] { read_metrics(path); });
    EXPECT_NE(e.find(path), std::string::npos) << e;
    EXPECT_NE(e.find("line 3"), std::string::npos) << e;
    EXPECT_NE(e.find("HINT"), std::string::npos) << e;

    write_text(path, train_line(0, 3) + "[1, 2]\n");
    e = error_of([&] { read_metrics(path); });
    EXPECT_NE(e.find("line 2"), std::string::npos) << e;

    write_text(path, "{\"loss\": 3}\n");
    e = error_of([&] { read_metrics(path); });
    EXPECT_NE(e.find("line 1"), std::string::npos) << e;
    EXPECT_NE(e.find("'step'"), std::string::npos) << e;

    write_text(path, train_line(0, 3) + "{\"step\": 1, \"loss\": \"low\"}\n");
    e = error_of([&] { read_metrics(path); });
    EXPECT_NE(e.find("line 2"), std::string::npos) << e;
    EXPECT_NE(e.find("'loss'"), std::string::npos) << e;

    write_text(path, "{\"step\": -1, \"loss\": 3}\n");
    EXPECT_NE(error_of([&] { read_metrics(path); }).find("line 1"), std::string::npos);
    write_text(path, "{\"step\": 1.5, \"loss\": 3}\n");
    EXPECT_NE(error_of([&] { read_metrics(path); }).find("line 1"), std::string::npos);

    EXPECT_NE(error_of([&] { read_metrics(t.file("missing.jsonl")); }).find("missing.jsonl"), std::string::npos);
}

TEST(SvgTicks, NiceScale) {
    NiceScale s = nice_scale(0, 500, 6);
    EXPECT_DOUBLE_EQ(s.step, 100);
    EXPECT_DOUBLE_EQ(s.lo, 0);
    EXPECT_DOUBLE_EQ(s.hi, 500);
    EXPECT_EQ(s.ticks.size(), 6u);

    s = nice_scale(3.2, 10.9, 6);
    EXPECT_DOUBLE_EQ(s.step, 2);
    EXPECT_DOUBLE_EQ(s.lo, 2);
    EXPECT_DOUBLE_EQ(s.hi, 12);
    EXPECT_EQ(s.ticks, (std::vector<double>{2, 4, 6, 8, 10, 12}));

    s = nice_scale(0.00012, 0.00061, 6);
    EXPECT_NEAR(s.step, 1e-4, 1e-18);
    EXPECT_LE(s.lo, 0.00012);
    EXPECT_GE(s.hi, 0.00061);

    s = nice_scale(-7, 13, 5);
    EXPECT_DOUBLE_EQ(s.step, 5);
    EXPECT_EQ(s.ticks, (std::vector<double>{-10, -5, 0, 5, 10, 15}));

    // Every step is 1, 2 or 5 times a power of ten, and the ticks cover the range.
    for (double lo : {-3.0, 0.0, 0.37, 1234.5}) {
        for (double span : {1e-6, 0.03, 1.0, 7.7, 250.0, 1e7}) {
            s = nice_scale(lo, lo + span, 6);
            double m = s.step / std::pow(10.0, std::floor(std::log10(s.step) + 1e-9));
            EXPECT_TRUE(std::fabs(m - 1) < 1e-9 || std::fabs(m - 2) < 1e-9 || std::fabs(m - 5) < 1e-9)
                << lo << " " << span << " step " << s.step;
            EXPECT_LE(s.lo, lo);
            EXPECT_GE(s.hi, lo + span);
            EXPECT_GE(s.ticks.size(), 2u);
            EXPECT_LE(s.ticks.size(), 12u);
        }
    }

    // Degenerate input: equal, swapped, non-finite.
    s = nice_scale(5, 5);
    EXPECT_LT(s.lo, 5);
    EXPECT_GT(s.hi, 5);
    EXPECT_GE(s.ticks.size(), 2u);
    s = nice_scale(0, 0);
    EXPECT_LT(s.lo, 0);
    EXPECT_GT(s.hi, 0);
    s = nice_scale(10, 0);
    EXPECT_DOUBLE_EQ(s.lo, 0);
    EXPECT_DOUBLE_EQ(s.hi, 10);
    s = nice_scale(NAN, INFINITY);
    EXPECT_TRUE(std::isfinite(s.lo) && std::isfinite(s.hi) && s.lo < s.hi);
}

TEST(SvgTicks, FormatTick) {
    EXPECT_EQ(format_tick(0, 100), "0");
    EXPECT_EQ(format_tick(1500, 500), "1500");
    EXPECT_EQ(format_tick(2.5, 0.5), "2.5");
    EXPECT_EQ(format_tick(4, 2), "4");
    EXPECT_EQ(format_tick(0.05, 0.01), "0.05");
    EXPECT_EQ(format_tick(120000, 20000), "120k");
    EXPECT_EQ(format_tick(1.5e6, 5e5), "1.5M");
    EXPECT_EQ(format_tick(6e-4, 1e-4), "6e-4");
    EXPECT_EQ(format_tick(1.2e-3, 2e-4), "1.2e-3");
    EXPECT_EQ(format_tick(-10, 5), "-10");
    EXPECT_EQ(format_tick(1e-17, 0.1), "0");  // rounding noise around zero
}

TEST(Svg, LineChartIsWellFormed) {
    ChartSpec c;
    c.title = "Loss & friends";
    c.x_label = "step";
    c.y_label = "loss <nats>";
    ChartSeries train{"train", {}, {}, "", true, false};
    for (int i = 0; i < 50; i++) train.x.push_back(i), train.y.push_back(10.0 / (1 + i));
    train.y[7] = NAN;
    train.y[9] = INFINITY;
    ChartSeries val{"val", {0, 10, 20, 30, 40}, {9, 1.2, 0.6, 0.4, 0.3}, "", true, true};
    c.series = {train, val};
    std::string svg = svg_line_chart(c);

    EXPECT_EQ(svg.rfind("<svg", 0), 0u);
    EXPECT_NE(svg.find("xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
    EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
    EXPECT_EQ(count(svg, "<svg"), 1u);
    EXPECT_EQ(count(svg, "<polyline"), 2u);
    EXPECT_EQ(polyline_points(svg, 0), 48u);  // two non-finite points skipped
    EXPECT_EQ(polyline_points(svg, 1), 5u);
    EXPECT_EQ(count(svg, "<circle"), 5u + 1u);  // val markers + legend marker
    EXPECT_NE(svg.find("Loss &amp; friends"), std::string::npos);
    EXPECT_NE(svg.find(">step</text>"), std::string::npos);
    EXPECT_NE(svg.find("loss &lt;nats&gt;"), std::string::npos);
    EXPECT_NE(svg.find(">train</text>"), std::string::npos);
    EXPECT_NE(svg.find(">val</text>"), std::string::npos);
    for (const char* bad : {"nan", "inf", "NaN", "Inf"}) EXPECT_EQ(svg.find(bad), std::string::npos) << bad;
    // Balanced elements: every opened <g>/<text> is closed.
    EXPECT_EQ(count(svg, "<g"), count(svg, "</g>"));
    EXPECT_EQ(count(svg, "<text"), count(svg, "</text>"));
    EXPECT_EQ(count(svg, "<"), count(svg, ">"));
}

TEST(Svg, EdgeCases) {
    auto chart = [](std::vector<double> x, std::vector<double> y) {
        ChartSpec c;
        c.title = "T";
        c.x_label = "step";
        c.y_label = "v";
        c.series.push_back({"s", std::move(x), std::move(y), "", true, false});
        return svg_line_chart(c);
    };
    // A single point: a polyline of one point plus a dot so that it shows.
    std::string one = chart({0}, {3.5});
    EXPECT_EQ(polyline_points(one), 1u);
    EXPECT_EQ(count(one, "<circle"), 1u);
    ChartSpec steps;
    steps.x_integer = true;
    steps.series.push_back({"", {0}, {1}, "", true, false});
    std::string s = svg_line_chart(steps);
    EXPECT_NE(s.find(">5</text>"), std::string::npos);   // x axis 0..5 in whole steps
    EXPECT_EQ(s.find(">0.2</text>"), std::string::npos);
    EXPECT_EQ(s.find(">-1</text>"), std::string::npos);
    // All-equal values, and only non-finite values.
    for (const std::string& svg : {chart({0, 1, 2, 3}, {2, 2, 2, 2}), chart({0, 1}, {NAN, INFINITY}), chart({}, {})}) {
        EXPECT_EQ(svg.rfind("<svg", 0), 0u);
        for (const char* bad : {"nan", "inf", "NaN", "Inf"}) EXPECT_EQ(svg.find(bad), std::string::npos) << bad;
    }
    EXPECT_EQ(polyline_points(chart({0, 1, 2, 3}, {2, 2, 2, 2})), 4u);
    EXPECT_NE(chart({0, 1}, {NAN, INFINITY}).find("no data"), std::string::npos);
    // Many points are downsampled, keeping the first and last and the extremes.
    std::vector<double> x, y;
    for (int i = 0; i < 100000; i++) x.push_back(i), y.push_back(std::sin(i * 0.01));
    y[54321] = 50;  // a spike must survive
    std::string big = chart(x, y);
    size_t n = polyline_points(big);
    EXPECT_GT(n, 1000u);
    EXPECT_LE(n, 2002u);
    ChartSpec c;
    c.series.push_back({"s", x, y, "", true, false});
    c.max_points = 1000000;
    EXPECT_EQ(polyline_points(svg_line_chart(c)), 100000u);
    // The spike is the top of the y range: some point sits at the top tick (y = 50 is a tick).
    EXPECT_NE(big.find(">50</text>"), std::string::npos);
}

TEST(Svg, LegendOnlyForNamedSeries) {
    ChartSpec c;
    c.title = "Learning rate";
    c.series.push_back({"", {0, 1, 2}, {1, 2, 3}, "", true, false});
    size_t unnamed = count(svg_line_chart(c), "<text");
    c.series[0].name = "lr";
    std::string named = svg_line_chart(c);
    EXPECT_EQ(count(named, "<text"), unnamed + 1);
    EXPECT_NE(named.find(">lr</text>"), std::string::npos);
}

TEST(Svg, DistinctIdsPerChart) {
    ChartSpec a, b;
    a.title = "Loss";
    b.title = "Learning rate";
    a.series.push_back({"s", {0, 1}, {1, 2}, "", true, false});
    b.series = a.series;
    std::string sa = svg_line_chart(a), sb = svg_line_chart(b);
    EXPECT_NE(sa.find("id=\"loss-plot\""), std::string::npos);
    EXPECT_NE(sb.find("id=\"learning-rate-plot\""), std::string::npos);
}

TEST(Report, WritesSvgsAndHtml) {
    TempDir t;
    fs::path run = t.dir / "my_run";
    fs::create_directories(run);
    std::string m;
    for (int s = 0; s < 100; s++) {
        m += train_line(s, 10.0 * std::exp(-s / 30.0) + 3, 1e-3 * (1 - s / 100.0), s < 80 ? 1000 : 2000, 100);
        if (s % 25 == 24) m += shardlm::cat("{\"step\": ", s, ", \"val_loss\": ", 4.0 + (s == 74 ? -0.5 : 0), "}\n");
    }
    write_text((run / "metrics.jsonl").string(), m);
    write_text((run / "config.json").string(),
               R"({"model": "small", "steps": 100, "lr": 0.001, "dataset": "tiny<shakespeare>"})");
    write_text((run / "summary.json").string(),
               R"({"final_val_loss": 4.0, "train_time_s": 10, "sample": "To be <or> not & to be"})");

    auto written = write_report(run.string() + "/");
    ASSERT_EQ(written.size(), 5u);
    for (const char* f : {"loss.svg", "tokens_per_s.svg", "lr.svg", "grad_norm.svg", "report.html"}) {
        EXPECT_TRUE(fs::exists(run / f)) << f;
    }
    std::string loss = shardlm::io::read_file((run / "loss.svg").string());
    EXPECT_EQ(loss.rfind("<svg", 0), 0u);
    EXPECT_EQ(count(loss, "<polyline"), 2u);
    EXPECT_EQ(polyline_points(loss, 0), 100u);
    EXPECT_EQ(polyline_points(loss, 1), 4u);

    std::string html = shardlm::io::read_file((run / "report.html").string());
    EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
    EXPECT_NE(html.find("<title>shardlm run: my_run</title>"), std::string::npos);
    EXPECT_NE(html.find("<h1>shardlm run: my_run</h1>"), std::string::npos);
    EXPECT_EQ(count(html, "<svg"), 4u);  // inlined, not linked
    EXPECT_EQ(html.find("<img"), std::string::npos);
    EXPECT_NE(html.find(loss), std::string::npos);
    // Config values.
    EXPECT_NE(html.find("<th>model</th><td>small</td>"), std::string::npos);
    EXPECT_NE(html.find("<th>steps</th><td>100</td>"), std::string::npos);
    EXPECT_NE(html.find("<th>lr</th><td>0.001</td>"), std::string::npos);
    EXPECT_NE(html.find("tiny&lt;shakespeare&gt;"), std::string::npos);
    // Summary and escaped sample.
    EXPECT_NE(html.find("<th>final_val_loss</th>"), std::string::npos);
    EXPECT_NE(html.find("<pre>To be &lt;or&gt; not &amp; to be</pre>"), std::string::npos);
    // Final numbers: last step 99, best val 3.5 at step 74, last val 4.0 at 99,
    // mean tokens/s of the last 20 steps = 2000, total time 100 * 100 ms = 10 s.
    EXPECT_NE(html.find("<th>last step</th><td>99</td>"), std::string::npos);
    EXPECT_NE(html.find("3.5000 (step 74)"), std::string::npos);
    EXPECT_NE(html.find("4.0000 (step 99)"), std::string::npos);
    EXPECT_NE(html.find("<td>2000</td>"), std::string::npos);
    EXPECT_NE(html.find("10.0s"), std::string::npos);
    for (const char* bad : {"nan", "inf<", ">inf"}) EXPECT_EQ(html.find(bad), std::string::npos) << bad;
    // No temp files left behind.
    for (const auto& e : fs::directory_iterator(run))
        EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
}

// report.html speaks as the user wrote the run: settings in their shortest text, a default shown as the
// value it resolves to, counts as integers, losses to 4 decimals, the run where it was named.
TEST(Report, SettingsAndSummaryReadAsAUserWroteThem) {
    TempDir t;
    TrainConfig c;
    c.model.preset = "small", c.optim.lr = 0.008f, c.optim.beta2 = 0.99f, c.optim.weight_decay = 0.1f, c.output.out = "runs/sotu";
    write_text(t.file("config.json"), config_to_json(c).dump(2));
    write_text(t.file("summary.json"),
               R"({"final_val_loss": 5.527961638386835, "tokens": 4096000.0, "steps": 2000, "train_time_s": 279.8576})");
    write_text(t.file("metrics.jsonl"), train_line(0, 5.0));
    write_report(t.dir.string());
    const std::string html = shardlm::io::read_file(t.file("report.html"));
    const std::string dflt = " <span class=\"dflt\">(default)</span>";
    EXPECT_NE(html.find("<th>lr</th><td>0.008</td>"), std::string::npos);
    EXPECT_NE(html.find("<th>beta2</th><td>0.99</td>"), std::string::npos);
    EXPECT_NE(html.find("<th>weight_decay</th><td>0.1</td>"), std::string::npos);
    EXPECT_NE(html.find("<th>beta1</th><td>0.9" + dflt), std::string::npos);  // -1: AdamW's own
    EXPECT_NE(html.find("<th>eps</th><td>1e-08" + dflt), std::string::npos);
    const int heads = shardlm::model::find_preset("small").n_head;
    EXPECT_NE(html.find(shardlm::cat("<th>n_head</th><td>", heads, dflt)), std::string::npos);  // 0: the preset's
    EXPECT_NE(html.find("<th>norm</th><td>layernorm" + dflt), std::string::npos);
    EXPECT_NE(html.find("<th>tokens</th><td>4096000</td>"), std::string::npos);
    EXPECT_NE(html.find("<th>steps</th><td>2000</td>"), std::string::npos);
    EXPECT_NE(html.find("<th>final_val_loss</th><td>5.5280</td>"), std::string::npos);
    EXPECT_NE(html.find("<th>train_time_s</th><td>279.9 s (4m 40s)</td>"), std::string::npos);
    EXPECT_NE(html.find("<p class=\"dir\">runs/sotu</p>"), std::string::npos);
    for (const char* bad : {"0.9900000095367432", "0.00800000037997961", "<td>-1", "4096000.0", t.dir.c_str()})
        EXPECT_EQ(html.find(bad), std::string::npos) << bad;
}

TEST(Report, WithoutOptionalFilesAndErrors) {
    TempDir t;
    write_text(t.file("metrics.jsonl"), train_line(0, 5.0));
    auto written = write_report(t.dir.string());
    EXPECT_EQ(written.size(), 5u);
    std::string html = shardlm::io::read_file(t.file("report.html"));
    EXPECT_NE(html.find("no config.json"), std::string::npos);
    EXPECT_EQ(html.find("<pre>"), std::string::npos);

    TempDir empty;
    std::string e = error_of([&] { write_report(empty.dir.string()); });
    EXPECT_NE(e.find("metrics.jsonl"), std::string::npos) << e;
    EXPECT_NE(e.find("HINT"), std::string::npos) << e;
    e = error_of([&] { write_report(empty.file("nope")); });
    EXPECT_NE(e.find("nope"), std::string::npos) << e;

    write_text(t.file("config.json"), "{\"model\": ");
    e = error_of([&] { write_report(t.dir.string()); });
    EXPECT_NE(e.find("config.json"), std::string::npos) << e;
    write_text(t.file("config.json"), "[1]");
    e = error_of([&] { write_report(t.dir.string()); });
    EXPECT_NE(e.find("not a JSON object"), std::string::npos) << e;
}
