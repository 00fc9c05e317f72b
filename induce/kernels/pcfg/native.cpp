// Max-product (Viterbi) inside pass of a dense PCFG on the CPU: the word tables, the chart and its backward.
//
// Built at first use by induce/kernels/pcfg/native.py with the machine's C++ compiler and loaded
// through ctypes (plain C entry points, float32, contiguous arrays). The PyTorch twin of each
// function is named beside it; the values are the same bit for bit: every entry is the same float32
// sum of two numbers, and a maximum is exact whatever order it runs in. A vector loop whose length
// is not a multiple of the vector width ends with a last full vector that overlaps the one before
// it (a maximum taken twice over the same element is unchanged), so no padded copies are needed.
//
// Layouts (N nonterminals, P preterminals, S = N + P symbols):
//   terms  [B, T, P]        the words' preterminal scores
//   y_t    [B, T, N, N]     [b, t, c, a]: parent a over (word t, nonterminal c)
//   z_t    [B, T, N, N]     [b, t, c, a]: parent a over (nonterminal c, word t)
//   w2     [B, T - 1, N]    two-word spans
//   rules  [B, N, N * N]    the NN block, [b, a, left * N + right]
//   spans  [B, T, T]        [b, first word, last word]
//   chart  [B, T, T, N]     [b, first word, width - 1, a]
#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

#if defined(__AVX512F__)
constexpr int V = 16;  // floats per vector register
constexpr int PARENTS = 4;
#else
constexpr int V = 8;
constexpr int PARENTS = 2;  // 16 registers: 4 spans x 2 parents accumulators, 6 loads
#endif
constexpr int SPANS = 4;  // spans per block of the rule step (and per work item of a width)

typedef float vec __attribute__((vector_size(V * sizeof(float))));
typedef float vec_unaligned __attribute__((vector_size(V * sizeof(float)), aligned(alignof(float))));

inline vec load(const float* p) { return *reinterpret_cast<const vec_unaligned*>(p); }
inline vec vmax(vec a, vec b) { return a > b ? a : b; }
inline void store(float* p, vec v) { *reinterpret_cast<vec_unaligned*>(p) = v; }

// acc[i] = max(acc[i], row[i] + t): the elementwise step every table and the child pairs are made of
// (the compiler vectorises it: x86's max instruction computes exactly this select).
inline void max_add(float* __restrict acc, const float* __restrict row, float t, int n) {
    for (int i = 0; i < n; ++i) {
        const float s = row[i] + t;
        acc[i] = s > acc[i] ? s : acc[i];
    }
}

inline void add(float* __restrict out, const float* __restrict row, float t, int n) {
    for (int i = 0; i < n; ++i) out[i] = row[i] + t;
}

constexpr int WORDS = 4, CHUNKS = 3;  // the word tables' register block: words by vectors along c
constexpr int LEFTS = 6, PAIR_CHUNKS = 2;  // the child pairs' register block: left nonterminals by vectors along c2

// out rows of WORDS words from `first` (words past the last repeat it), for every vector of c: the
// CHUNKS vectors of a block share each rule row's load, the WORDS words each word's broadcast. C >= V.
void word_rows(const float* terms, const float* block, int64_t row_p, int P, int C, int T, int first, float* out,
               int64_t word_stride) {
    const float* words[WORDS];
    float* outs[WORDS];
    for (int i = 0; i < WORDS; ++i) {
        const int t = std::min(first + i, T - 1);
        words[i] = terms + int64_t(t) * P;
        outs[i] = out + int64_t(t) * word_stride;
    }
    for (int c0 = 0; c0 < C; c0 += CHUNKS * V) {
        int at[CHUNKS];
        for (int j = 0; j < CHUNKS; ++j) at[j] = std::min(c0 + j * V, C - V);
        vec acc[WORDS][CHUNKS], r[CHUNKS];
        for (int j = 0; j < CHUNKS; ++j) r[j] = load(block + at[j]);
        for (int i = 0; i < WORDS; ++i)
            for (int j = 0; j < CHUNKS; ++j) acc[i][j] = r[j] + words[i][0];
        for (int p = 1; p < P; ++p) {
            for (int j = 0; j < CHUNKS; ++j) r[j] = load(block + p * row_p + at[j]);
            for (int i = 0; i < WORDS; ++i)
                for (int j = 0; j < CHUNKS; ++j) acc[i][j] = vmax(acc[i][j], r[j] + words[i][p]);
        }
        for (int i = 0; i < WORDS; ++i)
            for (int j = 0; j < CHUNKS; ++j) store(outs[i] + at[j], acc[i][j]);
    }
}

// out[s][a] = max_c pairs[s][c] + rules[a][c] for SPANS spans by PARENTS parents, C >= V. Twin:
// _max_plus in dense_torch.py.
void rule_block(const float* const* pairs, const float* const* rules, int C, float out[SPANS][PARENTS]) {
    vec acc[SPANS][PARENTS];
    vec p[SPANS], r[PARENTS];
    for (int s = 0; s < SPANS; ++s) p[s] = load(pairs[s]);
    for (int a = 0; a < PARENTS; ++a) r[a] = load(rules[a]);
    for (int s = 0; s < SPANS; ++s)
        for (int a = 0; a < PARENTS; ++a) acc[s][a] = p[s] + r[a];
    for (int c = V; c < C; c += V) {
        const int o = std::min(c, C - V);
        for (int s = 0; s < SPANS; ++s) p[s] = load(pairs[s] + o);
        for (int a = 0; a < PARENTS; ++a) r[a] = load(rules[a] + o);
        for (int s = 0; s < SPANS; ++s)
            for (int a = 0; a < PARENTS; ++a) acc[s][a] = vmax(acc[s][a], p[s] + r[a]);
    }
    for (int s = 0; s < SPANS; ++s)
        for (int a = 0; a < PARENTS; ++a) {
            float m = acc[s][a][0];
            for (int l = 1; l < V; ++l) m = acc[s][a][l] > m ? acc[s][a][l] : m;
            out[s][a] = m;
        }
}

float rule_scalar(const float* pairs, const float* rules, int C) {
    float m = pairs[0] + rules[0];
    for (int c = 1; c < C; ++c) {
        const float s = pairs[c] + rules[c];
        m = s > m ? s : m;
    }
    return m;
}

// best[s][a] = max(best[s][a], max_c pairs[s][c] + rules[a][c]) for the SPANS spans of an item (rows
// past the width's last span repeat it: the same value is computed and written twice).
void rule_step(const float* const* pairs, const float* rules, int N, float* const* best) {
    const int C = N * N;
    for (int a0 = 0; a0 < N; a0 += PARENTS) {
        float out[SPANS][PARENTS];
        const float* rows[PARENTS];
        for (int a = 0; a < PARENTS; ++a) rows[a] = rules + int64_t(std::min(a0 + a, N - 1)) * C;
        if (C >= V) {
            rule_block(pairs, rows, C, out);
        } else {
            for (int s = 0; s < SPANS; ++s)
                for (int a = 0; a < PARENTS; ++a) out[s][a] = rule_scalar(pairs[s], rows[a], C);
        }
        for (int s = 0; s < SPANS; ++s)
            for (int a = 0; a < PARENTS && a0 + a < N; ++a)
                best[s][a0 + a] = out[s][a] > best[s][a0 + a] ? out[s][a] : best[s][a0 + a];
    }
}

struct Chart {
    const float *y_t, *z_t, *w2, *rules, *spans;
    float* chart;
    int B, T, N;
    const float* cell(int b, int start, int width) const {  // the N scores of a span
        return chart + ((int64_t(b) * T + start) * T + (width - 1)) * N;
    }
};

// pairs[c1][c2] = max over the splits of left[c1] + right[c2], for LEFTS left nonterminals from c1 (rows
// past N repeat the last) and every c2, in registers across the splits. N >= V.
void best_pairs(const Chart& g, int b, int s, int w, int c1, float* pairs) {
    const int N = g.N;
    int rows[LEFTS];
    for (int i = 0; i < LEFTS; ++i) rows[i] = std::min(c1 + i, N - 1);
    for (int c0 = 0; c0 < N; c0 += PAIR_CHUNKS * V) {
        int at[PAIR_CHUNKS];
        for (int j = 0; j < PAIR_CHUNKS; ++j) at[j] = std::min(c0 + j * V, N - V);
        vec acc[LEFTS][PAIR_CHUNKS], r[PAIR_CHUNKS];
        for (int lw = 2; lw <= w - 2; ++lw) {
            const float* left = g.cell(b, s, lw);
            const float* right = g.cell(b, s + lw, w - lw);
            for (int j = 0; j < PAIR_CHUNKS; ++j) r[j] = load(right + at[j]);
            for (int i = 0; i < LEFTS; ++i)
                for (int j = 0; j < PAIR_CHUNKS; ++j)
                    acc[i][j] = lw == 2 ? r[j] + left[rows[i]] : vmax(acc[i][j], r[j] + left[rows[i]]);
        }
        for (int i = 0; i < LEFTS; ++i)
            for (int j = 0; j < PAIR_CHUNKS; ++j) store(pairs + int64_t(rows[i]) * N + at[j], acc[i][j]);
    }
}

// One work item of width w: SPANS consecutive spans of sentence b from `first`. Twin: one width of
// _max_forward in dense_torch.py.
void chart_item(const Chart& g, int w, int b, int first, float* scratch) {
    const int N = g.N, T = g.T, n = T - w + 1;
    const float* pair_rows[SPANS];
    float* best[SPANS];
    for (int k = 0; k < SPANS; ++k) {
        pair_rows[k] = scratch + int64_t(std::min(k, n - 1 - first)) * N * N;
        best[k] = scratch + int64_t(SPANS) * N * N + int64_t(k) * N;
    }
    const int count = std::min(SPANS, n - first);
    for (int k = 0; k < count; ++k) {
        const int s = first + k;
        float* out = best[k];
        if (w == 2) {
            std::copy(g.w2 + (int64_t(b) * (T - 1) + s) * N, g.w2 + (int64_t(b) * (T - 1) + s + 1) * N, out);
            continue;
        }
        // PN: word s, right child s+1..j; NP: left child s..j-1, word j (the tables' rows: child c)
        const float* right = g.cell(b, s + 1, w - 1);
        const float* left = g.cell(b, s, w - 1);
        const float* y = g.y_t + (int64_t(b) * T + s) * N * N;
        const float* z = g.z_t + (int64_t(b) * T + s + w - 1) * N * N;
        add(out, y, right[0], N);
        for (int c = 1; c < N; ++c) max_add(out, y + int64_t(c) * N, right[c], N);
        for (int c = 0; c < N; ++c) max_add(out, z + int64_t(c) * N, left[c], N);
        if (w >= 4) {  // NN: the best child pair over the splits (left width 2 .. w - 2)
            float* pairs = scratch + int64_t(k) * N * N;
            if (N >= V) {
                for (int c1 = 0; c1 < N; c1 += LEFTS) best_pairs(g, b, s, w, c1, pairs);
                continue;
            }
            for (int lw = 2; lw <= w - 2; ++lw) {
                const float* l = g.cell(b, s, lw);
                const float* r = g.cell(b, s + lw, w - lw);
                for (int c = 0; c < N; ++c) {
                    if (lw == 2) add(pairs + int64_t(c) * N, r, l[c], N);
                    else max_add(pairs + int64_t(c) * N, r, l[c], N);
                }
            }
        }
    }
    if (w >= 4) rule_step(pair_rows, g.rules + int64_t(b) * N * N * N, N, best);
    for (int k = 0; k < count; ++k) {
        const int s = first + k;
        const float span = g.spans[(int64_t(b) * T + s) * T + s + w - 1];
        float* cell = g.chart + ((int64_t(b) * T + s) * T + (w - 1)) * N;
        for (int a = 0; a < N; ++a) cell[a] = best[k][a] + span;
    }
}

// sums[c] = (left[c / N] + right[c % N]) + rule[c], as the forward pass adds them; returns their maximum.
float split_max(const float* rule, const float* left, const float* right, int N, float* sums) {
    const int C = N * N;
    for (int c1 = 0; c1 < N; ++c1) {
        float* row = sums + int64_t(c1) * N;
        const float* rule_row = rule + int64_t(c1) * N;
        for (int c2 = 0; c2 < N; ++c2) row[c2] = (left[c1] + right[c2]) + rule_row[c2];
    }
    if (C < V) {
        float m = sums[0];
        for (int c = 1; c < C; ++c) m = sums[c] > m ? sums[c] : m;
        return m;
    }
    vec acc = load(sums);
    for (int c = V; c < C; c += V) acc = vmax(acc, load(sums + std::min(c, C - V)));
    float m = acc[0];
    for (int l = 1; l < V; ++l) m = acc[l] > m ? acc[l] : m;
    return m;
}

// The winning split of cell (b, s, a) of width w >= 3, found as _argmax_cells in dense_torch.py does
// (the first of equal maxima; NP over PN, NN over both only when larger), its gradient g sent to the
// tables or rule and to the children's cells of `grad` (the chart's layout).
struct Backward {
    const Chart& g;
    const float *y, *z;  // the word tables in their [b, t, a, c] layout (a cell reads a row of them)
    float *grad, *d_y, *d_z, *d_rules, *sums;  // sums: N * N floats of scratch
    float* cell(int b, int start, int width) const {
        return grad + ((int64_t(b) * g.T + start) * g.T + (width - 1)) * g.N;
    }
    void route(int w, int b, int s, int a, float share) const {
        const int N = g.N, T = g.T;
        const int64_t table = ((int64_t(b) * T + s) * N + a) * N, table_z = ((int64_t(b) * T + s + w - 1) * N + a) * N;
        const float* right = g.cell(b, s + 1, w - 1);
        const float* left = g.cell(b, s, w - 1);
        const float *y_row = y + table, *z_row = z + table_z;
        int pn_arg = 0, np_arg = 0;
        float pn_best = y_row[0] + right[0], np_best = z_row[0] + left[0];
        for (int c = 1; c < N; ++c) {
            const float pn = y_row[c] + right[c], np = z_row[c] + left[c];
            if (pn > pn_best) pn_best = pn, pn_arg = c;
            if (np > np_best) np_best = np, np_arg = c;
        }
        int kind = np_best > pn_best ? 1 : 0;
        int nn_arg = 0, nn_width = 0;
        if (w >= 4) {  // per split: its sums (a row of N * N), their maximum; the first split and entry holding it
            const float* rule = g.rules + (int64_t(b) * N + a) * N * N;
            float nn_best = 0.0f;
            for (int lw = 2; lw <= w - 2; ++lw) {
                const float best = split_max(rule, g.cell(b, s, lw), g.cell(b, s + lw, w - lw), N, sums);
                if (lw == 2 || best > nn_best) nn_best = best, nn_width = lw;
            }
            split_max(rule, g.cell(b, s, nn_width), g.cell(b, s + nn_width, w - nn_width), N, sums);
            while (nn_arg + 1 < N * N && !(sums[nn_arg] >= nn_best)) ++nn_arg;
            if (nn_best > std::max(pn_best, np_best)) kind = 2;
        }
        if (kind == 0) {
            d_y[table + pn_arg] += share;
            cell(b, s + 1, w - 1)[pn_arg] += share;
        } else if (kind == 1) {
            d_z[table_z + np_arg] += share;
            cell(b, s, w - 1)[np_arg] += share;
        } else {
            d_rules[(int64_t(b) * N + a) * N * N + nn_arg] += share;
            cell(b, s, nn_width)[nn_arg / N] += share;
            cell(b, s + nn_width, w - nn_width)[nn_arg % N] += share;
        }
    }
};

int clamp_threads(int threads) { return threads < 1 ? 1 : threads; }

}  // namespace

extern "C" {

// The build's vector width in floats (a smoke test of the loaded library).
int induce_vector_width() { return V; }

// out[b, t, a, c] = max_p terms[b, t, p] + rows[b, a, p, c] (rows strided: row_b, row_a, row_p, unit
// along c). Twin: _running_max in words.py.
void induce_word_table(const float* terms, const float* rows, float* out, int B, int T, int A, int P, int C,
                       int64_t row_b, int64_t row_a, int64_t row_p, int threads) {
    const int words_per_item = C >= V ? WORDS : 1;
    const int64_t items = int64_t(B) * A * ((T + words_per_item - 1) / words_per_item);
#pragma omp parallel for schedule(static) num_threads(clamp_threads(threads))
    for (int64_t item = 0; item < items; ++item) {
        const int64_t ba = item % (int64_t(B) * A);
        const int b = int(ba / A), a = int(ba % A), first = int(item / (int64_t(B) * A)) * words_per_item;
        const float* block = rows + b * row_b + a * row_a;
        if (C >= V) {
            word_rows(terms + int64_t(b) * T * P, block, row_p, P, C, T, first, out + (int64_t(b) * T * A + a) * C,
                      int64_t(A) * C);
            continue;
        }
        const float* word = terms + (int64_t(b) * T + first) * P;
        float* acc = out + ((int64_t(b) * T + first) * A + a) * C;
        add(acc, block, word[0], C);
        for (int p = 1; p < P; ++p) max_add(acc, block + p * row_p, word[p], C);
    }
}

// Fills the chart of widths 2 .. T (width 1 is not stored); cells off the widths stay as given.
void induce_max_chart(const float* y_t, const float* z_t, const float* w2, const float* rules, const float* spans,
                      float* chart, int B, int T, int N, int threads) {
    const Chart g{y_t, z_t, w2, rules, spans, chart, B, T, N};
    const int64_t scratch_size = int64_t(SPANS) * N * N + int64_t(SPANS) * N;
    for (int w = 2; w <= T; ++w) {
        const int n = T - w + 1, per_sentence = (n + SPANS - 1) / SPANS;
#pragma omp parallel num_threads(clamp_threads(threads))
        {
            std::vector<float> scratch(scratch_size);
#pragma omp for schedule(dynamic)
            for (int64_t item = 0; item < int64_t(B) * per_sentence; ++item)
                chart_item(g, w, int(item / per_sentence), int(item % per_sentence) * SPANS, scratch.data());
        }
    }
}

// The max mode's backward (twin: max_backward in dense_torch.py): `grad` [B, T, T, N], the chart's
// gradient, is consumed in place (each cell's children receive their shares in it, widest first);
// y, z and d_y, d_z [B, T, N, N] are the tables untransposed ([b, t, a, c]); d_y, d_z, d_w2 [B, T - 1, N],
// d_rules [B, N, N * N] and d_spans [B, T, T] must be zero on entry. Only cells with a nonzero gradient are
// looked at.
void induce_max_backward(const float* y, const float* z, const float* rules, const float* chart, float* grad,
                         float* d_y, float* d_z, float* d_w2, float* d_rules, float* d_spans, int B, int T, int N,
                         int threads) {
    const Chart g{nullptr, nullptr, nullptr, rules, nullptr, const_cast<float*>(chart), B, T, N};
#pragma omp parallel for schedule(dynamic) num_threads(clamp_threads(threads))
    for (int b = 0; b < B; ++b) {
        std::vector<float> sums(int64_t(N) * N);
        const Backward back{g, y, z, grad, d_y, d_z, d_rules, sums.data()};
        for (int w = T; w >= 2; --w) {
            for (int s = 0; s + w <= T; ++s) {
                const float* share = back.cell(b, s, w);
                float total = 0.0f;
                for (int a = 0; a < N; ++a) total += share[a];
                d_spans[(int64_t(b) * T + s) * T + s + w - 1] = total;
                for (int a = 0; a < N; ++a) {
                    if (share[a] == 0.0f) continue;
                    if (w == 2) d_w2[(int64_t(b) * (T - 1) + s) * N + a] = share[a];
                    else back.route(w, b, s, a, share[a]);
                }
            }
        }
    }
}

}  // extern "C"
