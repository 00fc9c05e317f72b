// The dense PCFG's inside pass on the CPU as compiled loops: the max-product (Viterbi) word tables, chart
// and backward, and the sum-product chart and its outside pass (the training pass); and the log normaliser
// of the emissions over the vocabulary.
//
// Built at first use by induce/kernels/pcfg/native.py with the machine's C++ compiler and loaded
// through ctypes (plain C entry points, float32, contiguous arrays). The PyTorch twin of each
// function is named beside it. Max mode: the values are the same bit for bit: every entry is the same
// float32 sum of two numbers, and a maximum is exact whatever order it runs in. A vector loop whose
// length is not a multiple of the vector width ends with a last full vector that overlaps the one before
// it (a maximum taken twice over the same element is unchanged), so no padded copies are needed. Sum
// mode: the same scaled probability-space arithmetic as the eager twin (each cell stored as exp(beta -
// max) and its max, products of probabilities, sums clamped to the smallest normal float before their
// log), summed in another order (no matrix library): equal to float rounding. Its sums over the child
// pairs run over rows padded with zeros to a whole number of vectors (Cp floats).
//
// Layouts (N nonterminals, P preterminals, S = N + P symbols):
//   terms  [B, T, P]        the words' preterminal scores
//   y_t    [B, T, N, N]     [b, t, c, a]: parent a over (word t, nonterminal c)
//   z_t    [B, T, N, N]     [b, t, c, a]: parent a over (nonterminal c, word t)
//   w2     [B, T - 1, N]    two-word spans
//   rules  [B, N, N * N]    the NN block, [b, a, left * N + right]
//   spans  [B, T, T]        [b, first word, last word]
//   chart  [B, T, T, N]     [b, first word, width - 1, a]
// Sum mode (scaled tables, rows with their log shifts):
//   ey, ez [B, T, N, N]     [b, t, a, c]: exp(y - y_max), exp(z - z_max), y_max, z_max [B, T, N]
//   e_nn   [G, N, Cp]       exp(rules - c_nn), c_nn [G, N]: the NN block's row maxima (G = 1: one grammar)
//   beta, e [B, T, T, N], m [B, T, T]: a cell's log score, exp(beta - m) and m = max_a beta
// and, for the emissions over the vocabulary (induce/kernels/pcfg/emissions.py), each row's log normaliser
// and its gradient with respect to the row's scores; and the split sums of the rank-space pass (the low-rank
// and simple PCFGs' sum mode), forward and backward.
#include <algorithm>
#include <cfloat>
#include <cmath>
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

typedef int32_t ivec __attribute__((vector_size(V * sizeof(int32_t))));
inline vec splat(float x) { return vec{} + x; }

// exp(x) lane by lane (the sum mode's): x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two parts, so that r is exact
// to float rounding), e^r by its Taylor series to r^7 (the first term left out is below 6e-9 of the sum), and
// 2^n as two factors, so that results below the smallest normal float come out subnormal as expf's do. Within a
// few ulp of expf; exp(-inf) = 0, exp(inf) = inf, NaN stays NaN.
inline vec vexp(vec x) {
    const vec high = splat(88.7228f), low = splat(-103.97209f);
    vec y = x != x ? splat(0.0f) : x;  // NaN: a number to convert (the lane is NaN again at the end)
    y = y > high ? high : y;
    y = y < low ? low : y;
    const vec t = y * 1.44269504f;
    const ivec n = __builtin_convertvector(t + (t >= splat(0.0f) ? splat(0.5f) : splat(-0.5f)), ivec);
    const vec nf = __builtin_convertvector(n, vec);
    const vec r = (y - nf * 0.693359375f) - nf * -2.12194440e-4f;
    vec p = splat(1.0f / 5040);
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const ivec n1 = n >> 1, n2 = n - n1;  // each in [-75, 64]: 2^n1 and 2^n2 are normal floats
    vec out = p * (vec)((n1 + 127) << 23) * (vec)((n2 + 127) << 23);
    out = x > high ? splat(INFINITY) : out;
    out = x < low ? splat(0.0f) : out;
    return x != x ? x : out;
}

// log(x) lane by lane (the sum mode's): x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) = 2 atanh(s) with
// s = (m - 1) / (m + 1), |s| <= 0.1716, by its series to s^9 (the first term left out is below 3e-9 of the sum);
// subnormals scaled by 2^23 first. Within a few ulp of logf; log(0) = -inf, log(inf) = inf, and the log of a
// negative number or of NaN is NaN.
inline vec vlog(vec x) {
    const ivec subnormal = x < splat(FLT_MIN);
    const ivec bits = (ivec)(subnormal ? x * 8388608.0f : x);
    ivec e = ((bits >> 23) & 0xff) - 127;
    vec m = (vec)((bits & 0x7fffff) | 0x3f800000);
    const ivec above = m > splat(1.41421356f);
    m = above ? m * 0.5f : m;
    e = e - above;  // a true lane is -1
    const vec ef = __builtin_convertvector(e, vec) - (subnormal ? splat(23.0f) : splat(0.0f));
    const vec s = (m - 1.0f) / (m + 1.0f), s2 = s * s;
    vec p = splat(1.0f / 9);
    p = p * s2 + 1.0f / 7;
    p = p * s2 + 1.0f / 5;
    p = p * s2 + 1.0f / 3;
    p = p * s2 + 1.0f;
    vec out = ef * 0.693359375f + (2.0f * s * p + ef * -2.12194440e-4f);
    out = x == splat(0.0f) ? splat(-INFINITY) : out;
    out = x == splat(INFINITY) ? x : out;
    return x < splat(0.0f) || x != x ? splat(NAN) : out;
}

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


// ------------------------------------------------------------------------------------------- sum mode
// Rows of N floats are stored padded with zeros to Np, a multiple of V (the pairs of a span: N rows of Np,
// Cp = N * Np floats), so that every loop over a row runs in whole vectors and none needs a reduction
// across the lanes but the sum over the child pairs (once per span and parent).

// out += a * x over n floats (n a multiple of V)
inline void axpy(float* __restrict out, const float* __restrict x, float a, int n) {
    for (int i = 0; i < n; i += V) store(out + i, load(out + i) + a * load(x + i));
}

constexpr int GROUP = 2;  // vectors of a row summed in registers at once

// out[0:n] (+)= sum_i coef[i] rows[i][0:n] over `count` rows (row i at rows + i * stride), the sum over the rows
// in registers, GROUP vectors at a time, in the rows' order; n a multiple of V. `add`: onto out, else over it.
inline void combine(float* __restrict out, const float* __restrict rows, int64_t stride, const float* coef,
                    int count, int n, bool add) {
    for (int c0 = 0; c0 < n; c0 += GROUP * V) {
        const int chunks = std::min(GROUP, (n - c0) / V);
        vec acc[GROUP];
        for (int j = 0; j < GROUP; ++j) acc[j] = add && j < chunks ? load(out + c0 + j * V) : splat(0.0f);
        for (int i = 0; i < count; ++i) {
            const float a = coef[i];
            const float* row = rows + i * stride + c0;
            for (int j = 0; j < GROUP; ++j)
                if (j < chunks) acc[j] += a * load(row + j * V);
        }
        for (int j = 0; j < chunks; ++j) store(out + c0 + j * V, acc[j]);
    }
}

// out[k][a] = sum_c pairs[k][c] * rows[a][c] for SPANS pair rows by PARENTS rule rows, C a multiple of V
// (the lanes summed in order at the end). Twin: the NN product of _sum_forward in dense_torch.py.
void dot_block(const float* const* pairs, const float* const* rows, int C, float out[SPANS][PARENTS]) {
    vec acc[SPANS][PARENTS] = {};
    for (int c = 0; c < C; c += V) {
        vec p[SPANS], r[PARENTS];
        for (int s = 0; s < SPANS; ++s) p[s] = load(pairs[s] + c);
        for (int a = 0; a < PARENTS; ++a) r[a] = load(rows[a] + c);
        for (int s = 0; s < SPANS; ++s)
            for (int a = 0; a < PARENTS; ++a) acc[s][a] += p[s] * r[a];
    }
    for (int s = 0; s < SPANS; ++s)
        for (int a = 0; a < PARENTS; ++a) {
            float t = acc[s][a][0];
            for (int l = 1; l < V; ++l) t += acc[s][a][l];
            out[s][a] = t;
        }
}

struct SumChart {
    // ey, ez [B, T, N, Np]: [b, t, a, c]; ey_t, ez_t [B, T, N, Np]: [b, t, c, a] (the forward pass sums over c
    // by rows, the backward pass over a); e_nn [G, N, Cp]: [g, a, l * Np + r]
    const float *ey, *ey_t, *y_max, *ez, *ez_t, *z_max, *w2, *e_nn, *c_nn, *spans;
    // y_max, z_max [B, T, Np], c_nn [G, Np], w2 [B, T - 1, N]
    int64_t grammar_stride;  // 1: a grammar per sentence, 0: one grammar
    float *beta, *e, *m;     // beta, e [B, T, T, Np]; m [B, T, T]
    int T, N, Np;
    int64_t Cp() const { return int64_t(N) * Np; }
    int64_t cell(int b, int start, int width) const { return (int64_t(b) * T + start) * T + (width - 1); }
    const float* scaled(int b, int start, int width) const { return e + cell(b, start, width) * Np; }
    float shift(int b, int start, int width) const { return m[cell(b, start, width)]; }
    const float* rules(int b) const { return e_nn + grammar_stride * b * Cp() * N; }
    const float* rule_max(int b) const { return c_nn + grammar_stride * b * int64_t(Np); }
    float span(int b, int s, int w) const { return spans[(int64_t(b) * T + s) * T + s + w - 1]; }
    int64_t table(int b, int t) const { return (int64_t(b) * T + t) * N * Np; }
    // The child pairs of the NN splits of span (s, w), w >= 4: pairs[l * Np + r] = sum over the splits of
    // (e_left[l] exp(m_l + m_r - M)) e_right[r], as the eager twin's product (zero past N in each row);
    // returns M, the largest m_l + m_r.
    // `weights`: scratch of w - 3 floats.
    float pairs(int b, int s, int w, float* out, float* weights) const {
        constexpr int ROWS = 4;
        float big = -INFINITY;
        for (int lw = 2; lw <= w - 2; ++lw) big = std::max(big, shift(b, s, lw) + shift(b, s + lw, w - lw));
        for (int lw = 2; lw <= w - 2; ++lw) weights[lw - 2] = std::exp(shift(b, s, lw) + shift(b, s + lw, w - lw) - big);
        for (int c0 = 0; c0 < Np; c0 += GROUP * V) {  // ROWS rows by GROUP vectors in registers across the splits
            const int chunks = std::min(GROUP, (Np - c0) / V);
            for (int l0 = 0; l0 < N; l0 += ROWS) {
                vec acc[ROWS][GROUP] = {};
                for (int lw = 2; lw <= w - 2; ++lw) {
                    const float* left = scaled(b, s, lw) + l0;  // rows past N read the zeros of the padding
                    const float* right = scaled(b, s + lw, w - lw) + c0;
                    const float weight = weights[lw - 2];
                    vec r[GROUP];
                    for (int j = 0; j < GROUP; ++j) r[j] = j < chunks ? load(right + j * V) : splat(0.0f);
                    for (int i = 0; i < ROWS; ++i) {
                        const float a = left[i] * weight;
                        for (int j = 0; j < GROUP; ++j) acc[i][j] += a * r[j];
                    }
                }
                for (int i = 0; i < ROWS && l0 + i < N; ++i)
                    for (int j = 0; j < chunks; ++j) store(out + int64_t(l0 + i) * Np + c0 + j * V, acc[i][j]);
            }
        }
        return big;
    }
};

// Scratch of one sentence's pass: SPANS rows of pairs and of their gradients (Cp each), SPANS x 3 parts
// (Np each), two rows of Np and the weights of T splits.
int64_t sum_scratch(int T, int N, int Np) {
    return 2 * int64_t(SPANS) * N * Np + 3 * int64_t(SPANS) * Np + 2 * int64_t(Np) + T;
}

inline vec safe_log(vec s) { return vlog(s < splat(FLT_MIN) ? splat(FLT_MIN) : s); }  // NaN stays NaN

// The chart of sentence b of length L (widths 2 .. L), SPANS spans of a width at a time. Twin: _sum_forward.
void sum_sentence(const SumChart& g, int b, int L, float* scratch) {
    const int N = g.N, T = g.T, Np = g.Np;
    const int64_t Cp = g.Cp();
    float* pair_rows = scratch;
    float* parts = scratch + 2 * int64_t(SPANS) * Cp;  // [SPANS][3][Np]: PN, NP, NN
    float* weights = parts + 3 * int64_t(SPANS) * Np + 2 * int64_t(Np);
    const float* rules = g.rules(b);
    const float* rule_max = g.rule_max(b);
    for (int w = 2; w <= L; ++w) {
        const int n = L - w + 1;
        for (int first = 0; first < n; first += SPANS) {
            const int count = std::min(SPANS, n - first);
            float big[SPANS];
            for (int k = 0; k < count; ++k) {
                const int s = first + k, j = s + w - 1;
                float* pn = parts + int64_t(k) * 3 * Np;
                float* np = pn + Np;
                if (w == 2) continue;
                const float* right = g.scaled(b, s + 1, w - 1);  // PN: word s, span s+1..j
                const float* left = g.scaled(b, s, w - 1);       // NP: span s..j-1, word j
                const float* y_t = g.ey_t + g.table(b, s);
                const float* z_t = g.ez_t + g.table(b, j);
                combine(pn, y_t, Np, right, N, Np, false);
                combine(np, z_t, Np, left, N, Np, false);
                const float right_m = g.shift(b, s + 1, w - 1), left_m = g.shift(b, s, w - 1);
                const float* y_max = g.y_max + (int64_t(b) * T + s) * Np;
                const float* z_max = g.z_max + (int64_t(b) * T + j) * Np;
                for (int a = 0; a < Np; a += V) {
                    store(pn + a, safe_log(load(pn + a)) + load(y_max + a) + right_m);
                    store(np + a, safe_log(load(np + a)) + load(z_max + a) + left_m);
                }
                if (w >= 4) big[k] = g.pairs(b, s, w, pair_rows + int64_t(k) * Cp, weights);
            }
            if (w >= 4) {  // NN: the child pairs against the rules, SPANS spans by PARENTS parents
                const float* rows_k[SPANS];
                for (int k = 0; k < SPANS; ++k) rows_k[k] = pair_rows + int64_t(std::min(k, count - 1)) * Cp;
                for (int a0 = 0; a0 < N; a0 += PARENTS) {
                    const float* rows_a[PARENTS];
                    for (int a = 0; a < PARENTS; ++a) rows_a[a] = rules + int64_t(std::min(a0 + a, N - 1)) * Cp;
                    float out[SPANS][PARENTS];
                    dot_block(rows_k, rows_a, int(Cp), out);
                    for (int k = 0; k < count; ++k)
                        for (int a = 0; a < PARENTS && a0 + a < N; ++a) parts[(int64_t(k) * 3 + 2) * Np + a0 + a] = out[k][a];
                }
                for (int k = 0; k < count; ++k) {
                    float* nn = parts + (int64_t(k) * 3 + 2) * Np;
                    std::fill(nn + N, nn + Np, 0.0f);
                    for (int a = 0; a < Np; a += V) store(nn + a, safe_log(load(nn + a)) + big[k] + load(rule_max + a));
                }
            }
            for (int k = 0; k < count; ++k) {  // logsumexp of the parts (as torch.logsumexp), plus the span's score
                const int s = first + k;
                const float span = g.span(b, s, w);
                const float* pn = parts + int64_t(k) * 3 * Np;
                float* beta = g.beta + g.cell(b, s, w) * Np;
                if (w == 2) {
                    const float* two = g.w2 + (int64_t(b) * (T - 1) + s) * N;
                    for (int a = 0; a < N; ++a) beta[a] = two[a] + span;
                } else {
                    for (int a = 0; a < Np; a += V) {
                        const vec x = load(pn + a), y = load(pn + Np + a);
                        const vec z = w >= 4 ? load(pn + 2 * Np + a) : splat(-INFINITY);
                        vec top = vmax(x, vmax(y, z));
                        top = top == splat(INFINITY) || top == splat(-INFINITY) ? splat(0.0f) : top;
                        vec sum = vexp(x - top) + vexp(y - top);
                        if (w >= 4) sum += vexp(z - top);
                        store(beta + a, (vlog(sum) + top) + span);
                    }
                }
                float top = beta[0];
                for (int a = 1; a < N; ++a) top = beta[a] > top || std::isnan(beta[a]) ? beta[a] : top;
                g.m[g.cell(b, s, w)] = top;
                float* e = g.e + g.cell(b, s, w) * Np;
                for (int a = 0; a < N; a += V) store(e + a, vexp(load(beta + a) - top));
                std::fill(e + N, e + Np, 0.0f);
            }
        }
    }
}

struct SumGrads {
    float *grad, *d_ey, *d_ez, *d_w2, *d_enn, *d_spans;  // grad [B, T, T, Np]; d_ey, d_ez as ey; d_enn [B, N, Cp]
    int64_t Np;
    float* cell(const SumChart& g, int b, int start, int width) const { return grad + g.cell(b, start, width) * Np; }
};

// The outside pass of sentence b (twin: _sum_backward): the chart's gradient `grad` is consumed in place,
// each cell's children receiving their shares in it, widest first.
void sum_sentence_backward(const SumChart& g, const SumGrads& d, int b, int L, float* scratch) {
    const int N = g.N, T = g.T, Np = g.Np;
    const int64_t Cp = g.Cp();
    float* pair_rows = scratch;                         // [SPANS][Cp]
    float* q_rows = scratch + int64_t(SPANS) * Cp;      // [SPANS][Cp]: d/d pairs
    float* shares = scratch + 2 * int64_t(SPANS) * Cp;  // [SPANS][3][Np]: PN, NP, NN
    float* rows = shares + 3 * int64_t(SPANS) * Np;     // [2][Np]
    float* weights = rows + 2 * int64_t(Np);            // [T]
    const float* rules = g.rules(b);
    const float* rule_max = g.rule_max(b);
    float* d_enn = d.d_enn + int64_t(b) * N * Cp;
    for (int w = L; w >= 2; --w) {
        const int n = L - w + 1;
        for (int first = 0; first < n; first += SPANS) {
            const int count = std::min(SPANS, n - first);
            float big[SPANS];
            for (int k = 0; k < count; ++k) {
                const int s = first + k, j = s + w - 1;
                const float* grad = d.cell(g, b, s, w);
                float total = 0.0f;
                for (int a = 0; a < N; ++a) total += grad[a];
                d.d_spans[(int64_t(b) * T + s) * T + j] = total;
                if (w == 2) {
                    std::copy(grad, grad + N, d.d_w2 + (int64_t(b) * (T - 1) + s) * N);
                    continue;
                }
                const float span = g.span(b, s, w);
                const float* beta = g.beta + g.cell(b, s, w) * Np;
                const float* right = g.scaled(b, s + 1, w - 1);
                const float* left = g.scaled(b, s, w - 1);
                const float right_m = g.shift(b, s + 1, w - 1), left_m = g.shift(b, s, w - 1);
                const float* y_max = g.y_max + (int64_t(b) * T + s) * Np;
                const float* z_max = g.z_max + (int64_t(b) * T + j) * Np;
                float* h_pn = shares + int64_t(k) * 3 * Np;
                float* h_np = h_pn + Np;
                float* h_nn = h_pn + 2 * Np;
                if (w >= 4) big[k] = g.pairs(b, s, w, pair_rows + int64_t(k) * Cp, weights);
                // a part's share: d/d its sum = grad exp(its shifts - base), base the log of the parts' sum (lanes
                // past N are never read)
                for (int a = 0; a < Np; a += V) {
                    const vec base = load(beta + a) - span, gr = load(grad + a);
                    store(h_pn + a, gr * vexp(load(y_max + a) + right_m - base));
                    store(h_np + a, gr * vexp(load(z_max + a) + left_m - base));
                    if (w >= 4) store(h_nn + a, gr * vexp(load(rule_max + a) + big[k] - base));
                }
                // PN: the table y of word s (d_y[a] += h[a] e_right) and the right child (h @ y, times e_right);
                // NP: the table z of word j and the left child
                const float* y = g.ey + g.table(b, s);
                const float* z = g.ez + g.table(b, j);
                float* d_y = d.d_ey + g.table(b, s);
                float* d_z = d.d_ez + g.table(b, j);
                float* t_right = rows;
                float* t_left = rows + Np;
                for (int a = 0; a < N; ++a) {
                    axpy(d_y + int64_t(a) * Np, right, h_pn[a], Np);
                    axpy(d_z + int64_t(a) * Np, left, h_np[a], Np);
                }
                combine(t_right, y, Np, h_pn, N, Np, false);
                combine(t_left, z, Np, h_np, N, Np, false);
                float* to_right = d.cell(g, b, s + 1, w - 1);
                float* to_left = d.cell(g, b, s, w - 1);
                for (int c = 0; c < N; ++c) {
                    to_right[c] += right[c] * t_right[c];
                    to_left[c] += left[c] * t_left[c];
                }
            }
            if (w < 4) continue;
            // NN: d e_nn[a] += sum_k h_nn[k][a] pairs[k]; q[k] = sum_a h_nn[k][a] e_nn[a] (d/d pairs)
            for (int a = 0; a < N; ++a) {
                float h[SPANS];
                for (int k = 0; k < count; ++k) h[k] = shares[(int64_t(k) * 3 + 2) * Np + a];
                combine(d_enn + int64_t(a) * Cp, pair_rows, Cp, h, count, int(Cp), true);
            }
            for (int64_t c0 = 0; c0 < Cp; c0 += 2 * V) {
                const int chunks = c0 + V < Cp ? 2 : 1;
                vec acc[SPANS][2] = {};
                for (int a = 0; a < N; ++a) {
                    const float* row = rules + int64_t(a) * Cp + c0;
                    vec r[2];
                    for (int c = 0; c < chunks; ++c) r[c] = load(row + c * V);
                    for (int k = 0; k < count; ++k) {
                        const float h = shares[(int64_t(k) * 3 + 2) * Np + a];
                        for (int c = 0; c < chunks; ++c) acc[k][c] += h * r[c];
                    }
                }
                for (int k = 0; k < count; ++k)
                    for (int c = 0; c < chunks; ++c) store(q_rows + int64_t(k) * Cp + c0 + c * V, acc[k][c]);
            }
            for (int k = 0; k < count; ++k) {  // the children of each split: left q e_right, right q^T e_left
                const int s = first + k;
                const float* q = q_rows + int64_t(k) * Cp;
                float* q_t = pair_rows + int64_t(k) * Cp;  // the pairs are spent: q transposed, [r][l]
                for (int r = 0; r < N; ++r) {
                    float* row = q_t + int64_t(r) * Np;
                    for (int l = 0; l < N; ++l) row[l] = q[int64_t(l) * Np + r];
                    std::fill(row + N, row + Np, 0.0f);
                }
                for (int lw = 2; lw <= w - 2; ++lw) {
                    const float weight = std::exp(g.shift(b, s, lw) + g.shift(b, s + lw, w - lw) - big[k]);
                    const float* left = g.scaled(b, s, lw);
                    const float* right = g.scaled(b, s + lw, w - lw);
                    float* v = rows;       // v[l] = sum_r q[l][r] e_right[r]
                    float* u = rows + Np;  // u[r] = sum_l e_left[l] q[l][r]
                    combine(v, q_t, Np, right, N, Np, false);
                    combine(u, q, Np, left, N, Np, false);
                    float* to_left = d.cell(g, b, s, lw);
                    float* to_right = d.cell(g, b, s + lw, w - lw);
                    for (int i = 0; i < N; ++i) {
                        to_left[i] += left[i] * weight * v[i];
                        to_right[i] += weight * right[i] * u[i];
                    }
                }
            }
        }
    }
}

// ------------------------------------------------------------------------- emissions over the vocabulary
// Rows of n floats read V at a time; a last part shorter than V is copied into a vector of `fill`.
inline vec load_part(const float* x, int64_t n, float fill) {
    float part[V];
    for (int l = 0; l < V; ++l) part[l] = l < n ? x[l] : fill;
    return load(part);
}

// log sum_i exp(x[i]) over a row of n floats, as torch.logsumexp: the maximum taken out (0 when it is
// infinite), the exps summed in vectors, the lanes in order (a NaN makes the sum NaN).
float row_logsumexp(const float* x, int64_t n) {
    vec top_v = splat(-INFINITY);
    int64_t i = 0;
    for (; i + V <= n; i += V) top_v = vmax(top_v, load(x + i));
    if (i < n) top_v = vmax(top_v, load_part(x + i, n - i, -INFINITY));
    float top = top_v[0];
    for (int l = 1; l < V; ++l) top = top_v[l] > top ? top_v[l] : top;
    const float shift = std::isinf(top) ? 0.0f : top;
    vec sum = splat(0.0f);
    for (i = 0; i + V <= n; i += V) sum += vexp(load(x + i) - shift);
    if (i < n) sum += vexp(load_part(x + i, n - i, -INFINITY) - shift);
    float total = sum[0];
    for (int l = 1; l < V; ++l) total += sum[l];
    return std::log(total) + shift;
}

// ------------------------------------------------------------------- the rank-space split sums
// The split sums of the low-rank (TN-PCFG) and simple PCFGs' sum mode, a span (b, i) of width w at a time:
// charts [B, N, N, r] as induce/kernels/pcfg/lowrank_torch.py lays them out, so that the w - 1 pairs of
// children of the span are rows u = 0 .. w - 2 of left[b, i, u] and right[b, i + w - 1, N - w + 1 + u].
// Twins: merge_forward and merge_backward there (the same sums, in vectors of V ranks; a part of a row
// shorter than V is read into a vector filled with -inf and written back lane by lane).
inline void store_part(float* x, vec v, int64_t n) {
    float part[V];
    store(part, v);
    for (int64_t l = 0; l < n; ++l) x[l] = part[l];
}

// l[at + i] + rr[at + i] for the m <= V lanes i of one vector (the lanes past m -inf).
inline vec pair_at(const float* l, const float* rr, int64_t at, int64_t m) {
    return m == V ? load(l + at) + load(rr + at) : load_part(l + at, m, -INFINITY) + load_part(rr + at, m, 0.0f);
}

// z[k] = log sum_u exp(l[u r + k] + rr[u r + k]) for k < r: the maximum over the splits taken out per rank
// (0 where it is -inf, so that a rank without a finite pair stays -inf, where the eager twin gives NaN).
void merge_span(const float* l, const float* rr, float* z, int splits, int64_t r) {
    for (int64_t k = 0; k < r; k += V) {
        const int64_t m = r - k < V ? r - k : V;
        vec top = splat(-INFINITY);
        for (int u = 0; u < splits; ++u) {
            const vec pair = pair_at(l, rr, u * r + k, m);
            top = vmax(top, pair);
        }
        const vec shift = top == splat(-INFINITY) ? splat(0.0f) : top;
        vec sum = splat(0.0f);
        for (int u = 0; u < splits; ++u) {
            const vec pair = pair_at(l, rr, u * r + k, m);
            sum += vexp(pair - shift);
        }
        const vec out = vlog(sum) + shift;
        if (m == V) store(z + k, out); else store_part(z + k, out, m);
    }
}

// gl[u r + k] += g[k] exp(l[u r + k] + rr[u r + k] - z[k]), and gr likewise: each pair's share of the span's
// gradient.
void merge_span_backward(const float* l, const float* rr, const float* z, const float* g, float* gl, float* gr,
                         int splits, int64_t r) {
    for (int64_t k = 0; k < r; k += V) {
        const int64_t m = r - k < V ? r - k : V;
        const vec zk = m == V ? load(z + k) : load_part(z + k, m, 0.0f);
        const vec gk = m == V ? load(g + k) : load_part(g + k, m, 0.0f);
        for (int u = 0; u < splits; ++u) {
            const int64_t at = u * r + k;
            const vec share = vexp(pair_at(l, rr, at, m) - zk) * gk;
            if (m == V) {
                store(gl + at, load(gl + at) + share);
                store(gr + at, load(gr + at) + share);
            } else {
                store_part(gl + at, load_part(gl + at, m, 0.0f) + share, m);
                store_part(gr + at, load_part(gr + at, m, 0.0f) + share, m);
            }
        }
    }
}

int clamp_threads(int threads) { return threads < 1 ? 1 : threads; }

}  // namespace

extern "C" {

// The build's vector width in floats (a smoke test of the loaded library).
int induce_vector_width() { return V; }

// out = exp(x) (which = 0) or log(x) (which = 1) by the sum mode's vector functions, n a multiple of V (the
// tests compare them with expf and logf).
void induce_vector_math(const float* x, float* out, int64_t n, int which) {
    for (int64_t i = 0; i < n; i += V) store(out + i, which == 0 ? vexp(load(x + i)) : vlog(load(x + i)));
}

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

// The sum mode's chart (twin: _sum_forward in dense_torch.py) of each sentence b over its own length
// lengths[b] (widths 2 .. lengths[b]); beta, e, m are written there and left as given elsewhere (e's padding
// included). Sentences run in parallel.
void induce_sum_chart(const float* ey_t, const float* y_max, const float* ez_t, const float* z_max, const float* w2,
                      const float* e_nn, const float* c_nn, int64_t grammar_stride, const float* spans,
                      const int64_t* lengths, float* beta, float* e, float* m, int B, int T, int N, int Np,
                      int threads) {
    const SumChart g{nullptr, ey_t, y_max, nullptr, ez_t, z_max, w2, e_nn, c_nn, spans, grammar_stride,
                     beta, e, m, T, N, Np};
#pragma omp parallel num_threads(clamp_threads(threads))
    {
        std::vector<float> scratch(sum_scratch(T, N, Np));
#pragma omp for schedule(dynamic)
        for (int b = 0; b < B; ++b) {
            const int L = int(std::min<int64_t>(lengths[b], T));
            if (L >= 2) sum_sentence(g, b, L, scratch.data());
        }
    }
}

// The sum mode's outside pass (twin: _sum_backward in dense_torch.py) over induce_sum_chart's beta, e, m:
// `grad` [B, T, T, Np], the chart's gradient (zero padded), is consumed in place; d_ey, d_ez [B, T, N, Np],
// d_w2 [B, T - 1, N], d_enn [B, N, N * Np] (the gradient of e_nn, one block per sentence) and d_spans
// [B, T, T] must be zero on entry.
void induce_sum_backward(const float* ey, const float* y_max, const float* ez, const float* z_max,
                         const float* e_nn, const float* c_nn, int64_t grammar_stride, const float* spans,
                         const int64_t* lengths, const float* beta, const float* e, const float* m, float* grad,
                         float* d_ey, float* d_ez, float* d_w2, float* d_enn, float* d_spans, int B, int T, int N,
                         int Np, int threads) {
    const SumChart g{ey, nullptr, y_max, ez, nullptr, z_max, nullptr, e_nn, c_nn, spans, grammar_stride,
                     const_cast<float*>(beta), const_cast<float*>(e), const_cast<float*>(m), T, N, Np};
    const SumGrads d{grad, d_ey, d_ez, d_w2, d_enn, d_spans, Np};
#pragma omp parallel num_threads(clamp_threads(threads))
    {
        std::vector<float> scratch(sum_scratch(T, N, Np));
#pragma omp for schedule(dynamic)
        for (int b = 0; b < B; ++b) {
            const int L = int(std::min<int64_t>(lengths[b], T));
            if (L >= 2) sum_sentence_backward(g, d, b, L, scratch.data());
        }
    }
}

// out[r] = log sum_v exp(x[r, v]) for R rows of n floats (twin: torch.logsumexp(x, -1)); rows in parallel.
void induce_row_logsumexp(const float* x, float* out, int64_t R, int64_t n, int threads) {
#pragma omp parallel for schedule(static) num_threads(clamp_threads(threads))
    for (int64_t r = 0; r < R; ++r) out[r] = row_logsumexp(x + r * n, n);
}

// The gradient of log-normalised rows with respect to their scores for row gradients summing to s[r]:
// d[r, v] = -exp(x[r, v] - lse[r]) s[r] (d may be x itself); the words' own shares are the caller's to add.
// Rows in parallel.
void induce_softmax_backward(const float* x, const float* lse, const float* s, float* d, int64_t R, int64_t n,
                             int threads) {
#pragma omp parallel for schedule(static) num_threads(clamp_threads(threads))
    for (int64_t r = 0; r < R; ++r) {
        const float* row = x + r * n;
        float* out = d + r * n;
        const float shift = lse[r], scale = -s[r];
        int64_t i = 0;
        for (; i + V <= n; i += V) store(out + i, vexp(load(row + i) - shift) * scale);
        if (i < n) store_part(out + i, vexp(load_part(row + i, n - i, -INFINITY) - shift) * scale, n - i);
    }
}

// z[b, i, :] for the spans (i, i + width) of every sentence: merge_span over the charts [B, N, N, r] into
// z [B, N - width + 1, r]. Spans in parallel.
void induce_merge_forward(const float* left, const float* right, float* z, int B, int N, int r, int width,
                          int threads) {
    const int n = N - width + 1;
    const int64_t row = int64_t(N) * r, chart = int64_t(N) * row;
#pragma omp parallel for schedule(static) num_threads(clamp_threads(threads))
    for (int64_t item = 0; item < int64_t(B) * n; ++item) {
        const int64_t b = item / n, i = item % n;
        merge_span(left + b * chart + i * row, right + b * chart + (i + width - 1) * row + int64_t(N - width + 1) * r,
                   z + item * r, width - 1, r);
    }
}

// The gradients of induce_merge_forward added into grad_left / grad_right [B, N, N, r] from grad_z [B, n, r]
// (z its output). The spans of one width touch disjoint rows of both charts: spans in parallel.
void induce_merge_backward(const float* left, const float* right, const float* z, const float* grad_z,
                           float* grad_left, float* grad_right, int B, int N, int r, int width, int threads) {
    const int n = N - width + 1;
    const int64_t row = int64_t(N) * r, chart = int64_t(N) * row;
#pragma omp parallel for schedule(static) num_threads(clamp_threads(threads))
    for (int64_t item = 0; item < int64_t(B) * n; ++item) {
        const int64_t b = item / n, i = item % n;
        const int64_t at_left = b * chart + i * row;
        const int64_t at_right = b * chart + (i + width - 1) * row + int64_t(N - width + 1) * r;
        merge_span_backward(left + at_left, right + at_right, z + item * r, grad_z + item * r,
                            grad_left + at_left, grad_right + at_right, width - 1, r);
    }
}

}  // extern "C"
