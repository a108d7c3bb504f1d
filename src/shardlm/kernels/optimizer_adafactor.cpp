// kernels/optimizer_adafactor.cpp: Adafactor's passes over every piece of a step (kernels/optimizer_kernels.h): the
// row and column sums of the squared gradient, and the factored and vector updates with their RMS sums. Each
// pass is one parallel region over units of work (a piece's rows, a column chunk, a vector's chunk) that the
// threads take as they come; each unit writes its sums to its own slots, added in the units' order afterwards,
// so no sum depends on the threads.
#include <algorithm>
#include <cmath>
#include <vector>

#include "shardlm/kernels/optimizer_kernels.h"

namespace shardlm::kernels {

namespace {

constexpr size_t kRowsPerUnit = 16, kColChunk = 256, kVectorChunk = 4096;

// The sum of term(i) over b <= i < e in eight lanes (element i in lane (i - b) % 8), the lanes added pairwise at
// the end: eight chains of additions the compiler runs as vector lanes, where one chain waited on each addition
// (Adafactor's step took 4x AdamW's, 2026-12-02). The order depends only on b and e, not on the threads.
template <class Term>
double lanes_sum(size_t b, size_t e, const Term& term) {
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t i = b;
    for (; i + 8 <= e; i += 8)
#pragma GCC unroll 8
        for (size_t l = 0; l < 8; l++) acc[l] += term(i + l);
    for (size_t l = 0; i < e; i++, l++) acc[l] += term(i);
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// A piece's rows that hold real elements: [r0, r1), and its elements' end i1
struct Rows {
    size_t i1, r0, r1;
};
Rows rows_of(const AdafactorPiece& pc) {
    const size_t i1 = std::min(pc.i0 + pc.n, pc.real_rows * pc.cols);
    if (pc.i0 >= i1) return {i1, 0, 0};
    return {i1, pc.i0 / pc.cols, (i1 - 1) / pc.cols + 1};
}

// A unit of a pass: piece j (of a column chunk: run j), its rows (a vector's elements, columns) [lo, hi), its sums
// from slot
struct Unit {
    size_t j, lo, hi, slot;
};

// p -= wd lr p; u = u / clip_div * lr; first moment; p -= u (transformers' Adafactor, in its order)
inline void adafactor_apply(float& p, float* m, float u, const AdafactorApply& a) {
    u = u / a.clip_div * a.lr;
    if (a.first_moment) {
        *m = a.beta1 * *m + (1.0f - a.beta1) * u;
        u = *m;
    }
    p = p + (-a.wd * a.lr) * p;
    p = p - u;
}

template <class Run>
void run_units(const std::vector<Unit>& units, const Run& run) {
    const long n = long(units.size());
#pragma omp parallel for schedule(dynamic, 1)
    for (long u = 0; u < n; u++) run(units[size_t(u)]);
}

}  // namespace

void adafactor_square_sums(const AdafactorPiece* pieces, size_t count, float gs) {
    // rows: each unit's rows' sums in slots, added to row[] in the units' order; columns: a unit per chunk of
    // columns of a run of pieces with the same col, each column summed down the run's rows in order
    std::vector<Unit> rows, cols;
    std::vector<std::vector<size_t>> runs;  // the pieces of each col, in order
    size_t slots = 0;
    for (size_t j = 0; j < count; j++) {
        const AdafactorPiece& pc = pieces[j];
        if (!pc.factored) continue;
        const Rows r = rows_of(pc);
        for (size_t a = r.r0; a < r.r1; a += kRowsPerUnit) {
            const size_t b = std::min(r.r1, a + kRowsPerUnit);
            rows.push_back({j, a, b, slots});
            slots += b - a;
        }
        auto run = std::find_if(runs.begin(), runs.end(), [&](const auto& k) { return pieces[k[0]].col == pc.col; });
        if (run != runs.end()) {
            run->push_back(j);
            continue;
        }
        for (size_t c0 = 0; c0 < pc.cols; c0 += kColChunk)
            cols.push_back({runs.size(), c0, std::min(pc.cols, c0 + kColChunk), 0});
        runs.push_back({j});
    }
    std::vector<double> part(slots);
    run_units(rows, [&](const Unit& u) {
        const AdafactorPiece& pc = pieces[u.j];
        const Rows r = rows_of(pc);
        for (size_t row = u.lo; row < u.hi; row++) {
            const size_t b = std::max(pc.i0, row * pc.cols), e = std::min(r.i1, (row + 1) * pc.cols);
            part[u.slot + (row - u.lo)] = lanes_sum(b, e, [&](size_t i) {
                const double x = double(pc.g[i - pc.i0] * gs);
                return x * x;
            });
        }
    });
    for (const Unit& u : rows)
        for (size_t row = u.lo; row < u.hi; row++) pieces[u.j].row[row] += part[u.slot + (row - u.lo)];
    run_units(cols, [&](const Unit& u) {  // (u.j: the run)
        for (size_t j : runs[u.j]) {
            const AdafactorPiece& pc = pieces[j];
            const Rows r = rows_of(pc);
            for (size_t row = r.r0; row < r.r1; row++) {
                const size_t b = std::max(pc.i0, row * pc.cols + u.lo), e = std::min(r.i1, row * pc.cols + u.hi);
                for (size_t i = b; i < e; i++) {
                    const double x = double(pc.g[i - pc.i0] * gs);
                    pc.col[i - row * pc.cols] += x * x;
                }
            }
        }
    });
}

void adafactor_update(const AdafactorPiece* pieces, size_t count, float gs, float beta2t, float eps1, bool apply,
                      double* out) {
    // units: a factored piece's rows in blocks, a vector's elements in chunks; a slot per row or chunk
    std::vector<Unit> units;
    std::vector<size_t> first(count + 1);
    size_t slots = 0;
    for (size_t j = 0; j < count; j++) {
        const AdafactorPiece& pc = pieces[j];
        first[j] = slots;
        if (pc.factored) {
            const Rows r = rows_of(pc);
            for (size_t a = r.r0; a < r.r1; a += kRowsPerUnit) {
                const size_t b = std::min(r.r1, a + kRowsPerUnit);
                units.push_back({j, a, b, slots});
                slots += b - a;
            }
        } else {
            for (size_t a = 0; a < pc.n; a += kVectorChunk) units.push_back({j, a, std::min(pc.n, a + kVectorChunk), slots++});
        }
    }
    first[count] = slots;
    std::vector<double> part(slots);
    run_units(units, [&](const Unit& u) {
        const AdafactorPiece& pc = pieces[u.j];
        if (!pc.factored) {
            const float *g = pc.g, *v = pc.v;
            if (apply) {
                for (size_t i = u.lo; i < u.hi; i++)
                    adafactor_apply(pc.p[i], pc.m ? pc.m + i : nullptr, (1.0f / std::sqrt(v[i])) * (g[i] * gs), pc.apply);
                return;
            }
            for (size_t i = u.lo; i < u.hi; i++) {
                const float gi = g[i] * gs;
                pc.v[i] = beta2t * pc.v[i] + (1.0f - beta2t) * (gi * gi + eps1);
            }
            part[u.slot] = lanes_sum(u.lo, u.hi, [&](size_t i) {
                const float x = (1.0f / std::sqrt(v[i])) * (g[i] * gs);
                return double(x) * x;
            });
            return;
        }
        const Rows r = rows_of(pc);
        for (size_t row = u.lo; row < u.hi; row++) {
            const size_t b = std::max(pc.i0, row * pc.cols), e = std::min(r.i1, (row + 1) * pc.cols);
            const float fr = pc.rf[row];
            const float* fc = pc.cf + (b - row * pc.cols);
            const float* gr = pc.g + (b - pc.i0);
            if (apply) {
                float* pr = pc.p + (b - pc.i0);
                if (float* mr = pc.m ? pc.m + (b - pc.i0) : nullptr)
                    for (size_t k = 0; k < e - b; k++) adafactor_apply(pr[k], mr + k, (fr * fc[k]) * (gr[k] * gs), pc.apply);
                else
                    for (size_t k = 0; k < e - b; k++) adafactor_apply(pr[k], nullptr, (fr * fc[k]) * (gr[k] * gs), pc.apply);
                continue;
            }
            part[u.slot + (row - u.lo)] = lanes_sum(0, e - b, [&](size_t k) {
                const float x = (fr * fc[k]) * (gr[k] * gs);
                return double(x) * x;
            });
        }
    });
    if (apply) return;
    for (size_t j = 0; j < count; j++) {  // each piece's slots in order
        double s = 0;
        for (size_t k = first[j]; k < first[j + 1]; k++) s += part[k];
        out[j] = s;
    }
}

}  // namespace shardlm::kernels
