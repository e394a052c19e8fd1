/* GATHER_IDX: a gather whose indices are data, read from the value arena.
 *
 *   out[k] = a[(int64)v[c + k]]   k < n;  a has b elements
 *
 * The indices are float64 values of a tape input that rt.grad refills on
 * every replay (minibatch indices drawn afresh by rng.choice/permutation/
 * integers, mapped to flat positions by numpy's own indexing).  The verifier
 * can only check that the index operand lies inside the arena; the values are
 * checked here, on every sweep: each must be an integer in [0, b), else the
 * sweep stops with RT_BAD_INDEX and nothing is read outside operand a.
 * Included by vm.c only. */
#ifndef REVTAPE_GATHER_IDX_H
#define REVTAPE_GATHER_IDX_H

static inline int rt_gather_idx_at(const double *v, int64_t c, int64_t i, int64_t b, int64_t *k)
{
    const double f = v[c + i];
    int64_t j;
    if (!(f >= 0.0 && f < (double)b))       /* also false for nan */
        return 0;
    j = (int64_t)f;
    if ((double)j != f)
        return 0;
    *k = j;
    return 1;
}

static inline int rt_gather_idx_forward(double *v, int64_t n, int64_t o, int64_t a, int64_t b,
                                        int64_t c)
{
    int64_t i, k;
    for (i = 0; i < n; i++) {
        if (!rt_gather_idx_at(v, c, i, b, &k))
            return RT_BAD_INDEX;
        v[o + i] = v[a + k];
    }
    return RT_OK;
}

/* d[a + idx[k]] += d[o + k]: the indices are checked again (a reverse or
 * tangent sweep may follow a forward sweep whose inputs were rewritten). */
static inline int rt_gather_idx_reverse(uint32_t fl, const double *v, double *d, int64_t n,
                                        int64_t o, int64_t a, int64_t b, int64_t c)
{
    int64_t i, k;
    if (fl & 1)
        for (i = 0; i < n; i++) {
            if (!rt_gather_idx_at(v, c, i, b, &k))
                return RT_BAD_INDEX;
            d[a + k] += d[o + i];
        }
    return RT_OK;
}

static inline int rt_gather_idx_tangent(const double *v, double *t, int64_t n, int64_t o,
                                        int64_t a, int64_t b, int64_t c)
{
    int64_t i, k;
    for (i = 0; i < n; i++) {
        if (!rt_gather_idx_at(v, c, i, b, &k))
            return RT_BAD_INDEX;
        t[o + i] = t[a + k];
    }
    return RT_OK;
}

#endif
