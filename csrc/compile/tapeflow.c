/* The compiler's data-flow pass: see tapeflow.h. */
#include "compile/tapeflow.h"

#include <stdlib.h>
#include <string.h>

int64_t rt_tape_flow(int64_t n_instr, const int64_t *out, const int32_t *nargs,
                     const int64_t *args, const uint8_t *diff, int32_t guards_on,
                     uint8_t *dep, uint8_t *adj, uint8_t *live, uint8_t *keep, int32_t *uses)
{
    int64_t p = 0;
    for (int64_t i = 0; i < n_instr; i++) {
        const int64_t *a = args + p;
        int32_t na = nargs[i];
        uint8_t d = 0, g = 0;
        for (int32_t j = 0; j < na; j++) {
            d |= dep[a[j]];
            g |= adj[a[j]];
        }
        /* SSA: the result's flags are final once its operands' are */
        if (out[i] >= 0 && d) {
            dep[out[i]] = 1;
            if (diff[i] && g)
                adj[out[i]] = 1;
        }
        p += na;
    }
    int64_t kept = 0;
    for (int64_t i = n_instr - 1; i >= 0; i--) {
        int32_t na = nargs[i];
        p -= na;
        const int64_t *a = args + p;
        int k;
        if (out[i] < 0) {
            /* a guard on constants never changes: dropped */
            k = 0;
            if (guards_on)
                for (int32_t j = 0; j < na; j++)
                    k |= dep[a[j]];
        } else {
            k = live[out[i]] && dep[out[i]];
        }
        if (k) {
            keep[i] = 1;
            kept++;
            for (int32_t j = 0; j < na; j++) {
                live[a[j]] = 1;
                uses[a[j]]++;
            }
        }
    }
    return kept;
}

/* ---------------------------------------------------------------- scalar lowering
 * compiler.py's fusions (scalar part), sum_chains and the scalar branch of
 * lower(), on the columns: each loop says which Python it mirrors, since the
 * two must build the same words (tests/test_lowering_c.py compares them). */

#define RT_WINDOW 16          /* > the 8 kept instructions a fusion looks back */

typedef struct {
    int64_t out;
    const int64_t *a;
    int32_t na;
    uint8_t bits;
} rt_kept_row;

static int64_t rt_base_of(const int32_t *base, int64_t v)
{
    return base[v] < 0 ? v : base[v];
}

/* fusions().fusable: the kept index of t's producer if it is a `want` whose
 * result is used once, not a root, at most 8 back, not already absorbed, and
 * no instruction between reads its operands' slots; else -1. */
static int64_t rt_fusable(const rt_kept_row *ring, int64_t k, int64_t t, uint8_t want,
                          const int32_t *uses, const uint8_t *nflags, const uint8_t *role,
                          const int32_t *base)
{
    int64_t i = -1;
    for (int64_t m = k - 1; m >= 0 && m >= k - 8; m--)
        if (ring[m % RT_WINDOW].out == t) {
            i = m;
            break;
        }
    if (i < 0)
        return -1;
    const rt_kept_row *p = &ring[i % RT_WINDOW];
    if (!(p->bits & want) || p->na != 2 || uses[t] != 1 || (nflags[t] & RT_LN_ROOT) || (role[i] & RT_LR_INNER))
        return -1;
    for (int64_t m = i + 1; m < k; m++) {
        const rt_kept_row *q = &ring[m % RT_WINDOW];
        if (q->bits & RT_LB_VIEW)
            continue;                 /* an offset: it reads nothing */
        for (int32_t x = 0; x < q->na; x++) {
            int64_t s = rt_base_of(base, q->a[x]);
            for (int32_t y = 0; y < p->na; y++)
                if (rt_base_of(base, p->a[y]) == s)
                    return -1;
        }
    }
    return i;
}

int64_t rt_tape_fuse(int64_t n_instr, const int64_t *out, const int32_t *nargs,
                     const int64_t *args, const uint8_t *keep, const uint16_t *opidx,
                     const uint8_t *opbits, int64_t n_nodes, const uint8_t *adj,
                     const int32_t *uses, uint8_t *nflags,
                     uint8_t *role, int32_t *link, int32_t *aux)
{
    /* node -> the node whose slots it is a view of (-1: its own); later node
     * -> kept index of the open sum chain ending in it */
    int32_t *map = malloc((size_t)(n_nodes > 0 ? n_nodes : 1) * sizeof(int32_t));
    if (!map)
        return -1;
    memset(map, 0xff, (size_t)n_nodes * sizeof(int32_t));
    rt_kept_row ring[RT_WINDOW];

    /* fusions(): AXPY and SQDIFF of scalars, in kept order */
    int64_t p = 0, k = 0;
    for (int64_t i = 0; i < n_instr; p += nargs[i], i++) {
        if (!keep[i])
            continue;
        const int64_t *a = args + p;
        uint8_t bits = opbits[opidx[i]];
        int64_t o = out[i];
        if ((bits & RT_LB_MAYBE_VIEW) && o >= 0 && nargs[i] >= 1)
            map[o] = (int32_t)rt_base_of(map, a[0]);
        if (o >= 0 && (nflags[o] & RT_LN_FLOAT)) {
            if ((bits & RT_LB_ADD) && nargs[i] == 2) {
                for (int j = 0; j < 2; j++) {
                    int64_t f = rt_fusable(ring, k, a[j], RT_LB_MUL, uses, nflags, role, map);
                    if (f >= 0) {
                        const rt_kept_row *q = &ring[f % RT_WINDOW];
                        role[f] |= RT_LR_INNER;
                        role[k] |= RT_LR_AXPY | (a[0] == a[j] ? RT_LR_OTHER_B : 0);
                        link[k] = (int32_t)q->a[0];
                        aux[k] = (int32_t)q->a[1];
                        break;
                    }
                }
            } else if ((bits & RT_LB_SQUARE) && nargs[i] == 1) {
                int64_t f = rt_fusable(ring, k, a[0], RT_LB_SUB, uses, nflags, role, map);
                if (f >= 0) {
                    const rt_kept_row *q = &ring[f % RT_WINDOW];
                    role[f] |= RT_LR_INNER;
                    role[k] |= RT_LR_SQDIFF;
                    link[k] = (int32_t)q->a[0];
                    aux[k] = (int32_t)q->a[1];
                }
            }
        }
        ring[k % RT_WINDOW] = (rt_kept_row){o, a, nargs[i], bits};
        k++;
    }

    /* sum_chains(): results that own their slot (scalars, not views, not absorbed) */
    p = 0;
    k = 0;
    for (int64_t i = 0; i < n_instr; i++) {
        if (!keep[i])
            continue;
        uint8_t bits = opbits[opidx[i]];
        if ((bits & RT_LB_OWNS) && out[i] >= 0 && (nflags[out[i]] & RT_LN_FLOAT)
            && !(role[k] & RT_LR_INNER))
            nflags[out[i]] |= RT_LN_OWNED;
        k++;
    }
    memset(map, 0xff, (size_t)n_nodes * sizeof(int32_t));
#define RT_SOLE(t) ((nflags[t] & RT_LN_OWNED) && uses[t] == 1)
    p = 0;
    k = 0;
    for (int64_t i = 0; i < n_instr; p += nargs[i], i++) {
        if (!keep[i])
            continue;
        const int64_t *a = args + p;
        uint8_t bits = opbits[opidx[i]];
        int64_t o = out[i];
        int is_add = (bits & RT_LB_ADD) != 0;
        if (!(bits & (RT_LB_ADD | RT_LB_SUB)) || nargs[i] != 2 || o < 0
            || !(nflags[o] & RT_LN_FLOAT) || (role[k] & (RT_LR_INNER | RT_LR_AXPY | RT_LR_SQDIFF))) {
            k++;
            continue;
        }
        uint8_t neg = is_add ? 0 : RT_LR_NEG;
        int orders = is_add ? 2 : 1;
        int linked = 0;
        for (int j = 0; j < orders; j++) {
            int64_t c = a[j], t = a[1 - j];
            if (map[c] >= 0 && uses[c] == 1 && !(nflags[c] & RT_LN_ROOT) && RT_SOLE(t) && adj[t]) {
                int32_t prev = map[c];
                map[c] = -1;
                role[prev] |= RT_LR_ABSORBED;
                role[k] |= RT_LR_LINK | neg;
                link[k] = prev;
                aux[k] = (int32_t)t;
                map[o] = (int32_t)k;
                linked = 1;
                break;
            }
        }
        if (!linked)
            for (int j = 0; j < orders; j++) {
                int64_t s = a[j], t = a[1 - j];
                if (RT_SOLE(t) && adj[t] && (!adj[s] || RT_SOLE(s))) {
                    role[k] |= RT_LR_LINK | neg;
                    link[k] = (int32_t)(-1 - s);
                    aux[k] = (int32_t)t;
                    map[o] = (int32_t)k;
                    break;
                }
            }
        k++;
    }
#undef RT_SOLE
    free(map);
    /* chains of more than one term end in a link nothing continues */
    int64_t terms = 0;
    for (int64_t j = 0; j < k; j++)
        if ((role[j] & (RT_LR_LINK | RT_LR_ABSORBED)) == RT_LR_LINK && link[j] >= 0)
            for (int64_t m = j; m >= 0; m = link[m])
                terms++;
    return terms;
}

int32_t rt_tape_emit(int64_t *state, int64_t n_instr, const int64_t *out,
                     const int32_t *nargs, const int64_t *args, const uint8_t *keep,
                     const uint16_t *opidx, const uint8_t *opbits, const uint8_t *opdiff,
                     const int32_t *opcode, const uint8_t *adj, const uint8_t *nflags,
                     const uint8_t *role, const int32_t *link, const int32_t *aux,
                     int32_t *offset, int32_t *words, int32_t *ints,
                     int32_t op_axpy, int32_t op_sqdiff, int32_t op_csum, int32_t flags_shift)
{
    int64_t i = state[0], p = state[1], k = state[2], next_free = state[3];
    int64_t nw = 0, ni = 0, ints_base = state[6];
    int32_t status = 0;
    for (; i < n_instr; p += nargs[i], i++) {
        if (!keep[i])
            continue;
        uint8_t r = role[k];
        if (r & (RT_LR_INNER | RT_LR_ABSORBED)) {
            k++;
            continue;                 /* emitted inside the AXPY or CSUM it ends in */
        }
        const int64_t *a = args + p;
        uint8_t bits = opbits[opidx[i]];
        int64_t o = out[i];
        int32_t *w = words + 6 * nw;
        if (r & RT_LR_PY) {
            status = 1;
            break;
        } else if ((r & RT_LR_LINK) && link[k] >= 0) {
            /* _lower_csum: the terms, first to last, are the links' back to the start */
            int64_t n = 0, m = k;
            for (; link[m] >= 0; m = link[m])
                n++;
            n++;
            int64_t start = -1 - (int64_t)link[m];
            int64_t c = ints_base + ni;
            int64_t j = ni + n;
            for (m = k; ; m = link[m]) {
                int32_t to = offset[aux[m]];
                ints[--j] = (role[m] & RT_LR_NEG) ? ~to : to;
                if (link[m] < 0)
                    break;
            }
            ni += n;
            if (c > INT32_MAX || n > INT32_MAX) {
                status = -1;
                break;
            }
            w[0] = op_csum | ((adj[start] | 2) << flags_shift);
            w[1] = (int32_t)n;
            w[3] = offset[start];
            w[4] = 0;
            w[5] = (int32_t)c;
        } else if (r & (RT_LR_AXPY | RT_LR_SQDIFF)) {
            int64_t x = link[k], y = aux[k];
            w[1] = 1;
            if (r & RT_LR_AXPY) {
                int64_t other = (r & RT_LR_OTHER_B) ? a[1] : a[0];
                w[0] = op_axpy | ((adj[other] | (adj[x] << 1) | (adj[y] << 2)) << flags_shift);
                w[3] = offset[other];
                w[4] = offset[x];
                w[5] = offset[y];
            } else {
                w[0] = op_sqdiff | ((adj[x] | (adj[y] << 1)) << flags_shift);
                w[3] = offset[x];
                w[4] = offset[y];
                w[5] = 0;
            }
        } else if ((bits & RT_LB_SCALAR) && o >= 0 && (nflags[o] & RT_LN_FLOAT)
                   && nargs[i] >= 1 && nargs[i] <= 2) {
            int d = opdiff[opidx[i]] != 0;
            w[1] = 1;
            w[3] = offset[a[0]];
            w[5] = 0;
            if (nargs[i] == 1) {
                w[0] = opcode[opidx[i]] | ((d & adj[a[0]]) << flags_shift);
                w[4] = 0;
            } else {
                w[0] = opcode[opidx[i]] | (((d & adj[a[0]]) | ((d & adj[a[1]]) << 1)) << flags_shift);
                w[4] = offset[a[1]];
            }
        } else if ((bits & RT_LB_VIEW) && o >= 0 && nargs[i] >= 1) {
            int64_t v = (int64_t)offset[a[0]] + link[k];
            if (v > INT32_MAX || v < INT32_MIN) {
                status = -1;
                break;
            }
            offset[o] = (int32_t)v;
            k++;
            continue;
        } else {
            status = 1;
            break;
        }
        /* the result's one slot (every branch above that gets here has one) */
        if (next_free > INT32_MAX) {
            status = -1;
            break;
        }
        offset[o] = (int32_t)next_free;
        w[2] = (int32_t)next_free;
        next_free++;
        nw++;
        k++;
    }
    state[0] = i;
    state[1] = p;
    state[2] = k;
    state[3] = next_free;
    state[4] = nw;
    state[5] = ni;
    return status;
}
