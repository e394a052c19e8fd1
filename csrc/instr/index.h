/* Index maps (the side table at c holds n indices):
 *   GATHER       out[k] = a[ints[c+k]]                      k < n, a has b elements
 *   GATHER_IDX   out[k] = a[(int64)v[c+k]]                  k < n, a has b elements
 *   SCATTER_ADD  out[0..b) = 0; out[ints[c+k]] += a[k]      k < n
 *   SCATTER      out[ints[c+k]] = a[k]                      k < n, out has b elements */

RT_FWD(GATHER)
{
    int64_t i;
    for (i = 0; i < n; i++)
        v[o + i] = v[a + ints[c + i]];
}

RT_REV(GATHER)
{
    int64_t i;
    if (fl & 1)
        for (i = 0; i < n; i++)
            d[a + ints[c + i]] += d[o + i];
}

RT_TAN(GATHER)
{
    int64_t i;
    for (i = 0; i < n; i++)
        t[o + i] = t[a + ints[c + i]];
}

RT_VERIFY_FN(GATHER)
{
    const int64_t n = w[1], b = w[4], c = w[5];
    (void)len;
    return rt_vints(vc, "index map", c, n) && rt_vindices(vc, c, n, b, "input");
}

/* GATHER_IDX: a gather whose indices are data in the value arena (c: n
 * float64 values of a tape input that rt.grad refills on every replay --
 * minibatch indices drawn afresh by rng.choice/permutation/integers, mapped
 * to flat positions by numpy's own indexing).  The verifier can only check
 * that the index operand lies in the arena, so every sweep checks each value:
 * an integer in [0, b), else RT_BAD_INDEX before anything outside a is read.
 * (The reverse and tangent check again: their sweep may follow a forward
 * whose inputs were rewritten since.) */
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

RT_FWD_CHECKED(GATHER_IDX)
{
    int64_t i, k;
    (void)ints;
    for (i = 0; i < n; i++) {
        if (!rt_gather_idx_at(v, c, i, b, &k))
            return RT_BAD_INDEX;
        v[o + i] = v[a + k];
    }
    return RT_OK;
}

RT_REV_CHECKED(GATHER_IDX)
{
    int64_t i, k;
    (void)ints;
    if (fl & 1)
        for (i = 0; i < n; i++) {
            if (!rt_gather_idx_at(v, c, i, b, &k))
                return RT_BAD_INDEX;
            d[a + k] += d[o + i];
        }
    return RT_OK;
}

RT_TAN_CHECKED(GATHER_IDX)
{
    int64_t i, k;
    (void)ints; (void)fl;
    for (i = 0; i < n; i++) {
        if (!rt_gather_idx_at(v, c, i, b, &k))
            return RT_BAD_INDEX;
        t[o + i] = t[a + k];
    }
    return RT_OK;
}

RT_FWD(SCATTER_ADD)
{
    int64_t i;
    for (i = 0; i < b; i++)
        v[o + i] = 0.0;
    for (i = 0; i < n; i++)
        v[o + ints[c + i]] += v[a + i];
}

/* SCATTER_ADD and SCATTER have one reverse: each element of a gets the
 * adjoint of the slot it went to. */
static inline void rt_rev_scatter(uint32_t fl, double *d, const int32_t *ints, int64_t n,
                                  int64_t o, int64_t a, int64_t c)
{
    int64_t i;
    if (fl & 1)
        for (i = 0; i < n; i++)
            d[a + i] += d[o + ints[c + i]];
}

RT_REV(SCATTER_ADD) { rt_rev_scatter(fl, d, ints, n, o, a, c); }

/* out[0..b) is still the caller's 0 (the tangent sweep's contract, vm/sweeps.c):
 * add in place */
RT_TAN(SCATTER_ADD)
{
    int64_t i;
    for (i = 0; i < n; i++)
        t[o + ints[c + i]] += t[a + i];
}

RT_VERIFY_FN(SCATTER_ADD)
{
    const int64_t n = w[1], b = w[4], c = w[5];
    (void)len;
    return rt_vints(vc, "index map", c, n) && rt_vindices(vc, c, n, b, "output");
}

RT_FWD(SCATTER)
{
    int64_t i;
    for (i = 0; i < n; i++)
        v[o + ints[c + i]] = v[a + i];
}

RT_REV(SCATTER) { rt_rev_scatter(fl, d, ints, n, o, a, c); }

RT_TAN(SCATTER)
{
    int64_t i;
    for (i = 0; i < n; i++)
        t[o + ints[c + i]] = t[a + i];
}

RT_VERIFY_FN(SCATTER) { return rt_verify_SCATTER_ADD(vc, w, len); }
