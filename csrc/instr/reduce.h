/* Segmented reductions: n segments of length b, out[s] = reduce(a[s*b .. s*b+b)).
 * Each matches numpy (and the reference replay's rule) bit for bit. */

/* np.max / np.min of one segment: nan propagates (numpy's
 * `io1 >= in2 || isnan(io1)`). */
static inline double rt_seg_max(const double *x, int64_t n)
{
    double m = x[0];
    int64_t j;
    for (j = 1; j < n; j++)
        if (!(m >= x[j] || m != m))
            m = x[j];
    return m;
}

static inline double rt_seg_min(const double *x, int64_t n)
{
    double m = x[0];
    int64_t j;
    for (j = 1; j < n; j++)
        if (!(m <= x[j] || m != m))
            m = x[j];
    return m;
}

/* ---- REDUCE_SUM: numpy's pairwise summation (kernels.c) */
RT_FWD(REDUCE_SUM)
{
    int64_t s;
    for (s = 0; s < n; s++)     /* 0.0 +: as numpy, -0.0 sums to 0.0 */
        v[o + s] = 0.0 + rt_k_pairwise_sum(v + a + s * b, b);
}

RT_REV(REDUCE_SUM)
{
    int64_t s;
    if (fl & 1)
        for (s = 0; s < n; s++) {
            const double g = d[o + s];
            if (g != 0.0)
                rt_k_add_scalar(b, d + a + s * b, g);
        }
}

RT_TAN(REDUCE_SUM)
{
    int64_t s, i;
    for (s = 0; s < n; s++) {
        const double *tx = t + a + s * b;
        double r = 0.0;
        for (i = 0; i < b; i++)
            r += tx[i];
        t[o + s] = r;
    }
}

/* ---- REDUCE_MAX, REDUCE_MIN: the elements equal to the result share the
 * adjoint evenly, g * (1 / count) as the reference replay computes it.  A
 * nan result matches no element: count = 0 and, as the reference's 0/0,
 * every element of the segment gets nan. */
static inline void rt_rev_extremum(uint32_t fl, const double *v, double *d, int64_t n,
                                   int64_t o, int64_t a, int64_t b)
{
    int64_t s, i;
    if (fl & 1)
        for (s = 0; s < n; s++) {
            const double g = d[o + s], f = v[o + s];
            const double *x = v + a + s * b;
            double *dx = d + a + s * b;
            int64_t cnt = 0;
            if (g == 0.0)
                continue;
            for (i = 0; i < b; i++)
                cnt += x[i] == f;
            if (cnt == 0) {
                for (i = 0; i < b; i++)
                    dx[i] += g * NAN;
            } else {
                const double share = g * (1.0 / (double)cnt);
                for (i = 0; i < b; i++)
                    if (x[i] == f)
                        dx[i] += share;
            }
        }
}

/* The reverse's weights: 1/count on the elements equal to the result; nan
 * when none is (a nan result). */
static inline void rt_tan_extremum(const double *v, double *t, int64_t n, int64_t o,
                                   int64_t a, int64_t b)
{
    int64_t s, i;
    for (s = 0; s < n; s++) {
        const double f = v[o + s];
        const double *x = v + a + s * b, *tx = t + a + s * b;
        int64_t cnt = 0;
        double r = 0.0;
        for (i = 0; i < b; i++)
            cnt += x[i] == f;
        for (i = 0; i < b; i++)
            if (tx[i] != 0.0 && (cnt == 0 || x[i] == f))
                r += tx[i] * (cnt == 0 ? NAN : 1.0 / (double)cnt);
        t[o + s] = r;
    }
}

RT_FWD(REDUCE_MAX)
{
    int64_t s;
    for (s = 0; s < n; s++)
        v[o + s] = rt_seg_max(v + a + s * b, b);
}
RT_REV(REDUCE_MAX) { rt_rev_extremum(fl, v, d, n, o, a, b); }
RT_TAN(REDUCE_MAX) { rt_tan_extremum(v, t, n, o, a, b); }

RT_FWD(REDUCE_MIN)
{
    int64_t s;
    for (s = 0; s < n; s++)
        v[o + s] = rt_seg_min(v + a + s * b, b);
}
RT_REV(REDUCE_MIN) { rt_rev_extremum(fl, v, d, n, o, a, b); }
RT_TAN(REDUCE_MIN) { rt_tan_extremum(v, t, n, o, a, b); }

/* ---- REDUCE_PROD: zero-safe partials.  No zero -> f / x; exactly one
 * zero -> that element gets the product of the others, the others 0; two
 * or more zeros -> 0 everywhere. */
RT_FWD(REDUCE_PROD)
{
    int64_t s, i;
    for (s = 0; s < n; s++) {
        const double *x = v + a + s * b;
        double r = 1.0;
        for (i = 0; i < b; i++)
            r *= x[i];
        v[o + s] = r;
    }
}

/* How many zeros x[0..b) holds (counting stops mattering at 2) and where the
 * last one is. */
static inline int64_t rt_prod_zeros(const double *x, int64_t b, int64_t *iz)
{
    int64_t i, zeros = 0;
    *iz = 0;
    for (i = 0; i < b; i++)
        if (x[i] == 0.0) {
            zeros++;
            *iz = i;
        }
    return zeros;
}

static inline double rt_prod_others(const double *x, int64_t b, int64_t iz)
{
    double others = 1.0;
    int64_t i;
    for (i = 0; i < b; i++)
        if (i != iz)
            others *= x[i];
    return others;
}

RT_REV(REDUCE_PROD)
{
    int64_t s, i, iz, zeros;
    if (fl & 1)
        for (s = 0; s < n; s++) {
            const double g = d[o + s], f = v[o + s];
            const double *x = v + a + s * b;
            double *dx = d + a + s * b;
            if (g == 0.0)
                continue;
            zeros = rt_prod_zeros(x, b, &iz);
            if (zeros == 0) {
                for (i = 0; i < b; i++)
                    dx[i] += g * (f / x[i]);
            } else if (zeros == 1) {
                dx[iz] += g * rt_prod_others(x, b, iz);
            }
        }
}

RT_TAN(REDUCE_PROD)
{
    int64_t s, i, iz, zeros;
    for (s = 0; s < n; s++) {
        const double f = v[o + s];
        const double *x = v + a + s * b, *tx = t + a + s * b;
        double r = 0.0;
        zeros = rt_prod_zeros(x, b, &iz);
        if (zeros == 0) {
            for (i = 0; i < b; i++)
                if (tx[i] != 0.0)
                    r += tx[i] * (f / x[i]);
        } else if (zeros == 1 && tx[iz] != 0.0) {
            r = tx[iz] * rt_prod_others(x, b, iz);
        }
        t[o + s] = r;
    }
}

/* ---- REDUCE_LOGSUMEXP: scipy.special.logsumexp (1.15+).  The maximal
 * elements are taken out of the sum, log1p(s / count) + log(count) + max;
 * nan -> nan; a +-inf maximum is the result (+inf present -> inf, all -inf
 * -> -inf); empty -> -inf.  Partials exp(x - f). */
static inline double rt_seg_logsumexp(const double *x, int64_t n)
{
    double m, s = 0.0;
    int64_t j, cnt = 0;
    if (n == 0)
        return -INFINITY;
    m = rt_seg_max(x, n);
    if (m != m || isinf(m))
        return m;
    for (j = 0; j < n; j++) {
        if (x[j] == m)
            cnt++;
        else
            s += exp(x[j] - m);
    }
    if (s != 0.0)
        s /= (double)cnt;
    return log1p(s) + log((double)cnt) + m;
}

RT_FWD(REDUCE_LOGSUMEXP)
{
    int64_t s;
    for (s = 0; s < n; s++)
        v[o + s] = rt_seg_logsumexp(v + a + s * b, b);
}

RT_REV(REDUCE_LOGSUMEXP)
{
    int64_t s, i;
    if (fl & 1)
        for (s = 0; s < n; s++) {
            const double g = d[o + s], f = v[o + s];
            const double *x = v + a + s * b;
            double *dx = d + a + s * b;
            if (g != 0.0)
                for (i = 0; i < b; i++)
                    dx[i] += g * exp(x[i] - f);
        }
}

RT_TAN(REDUCE_LOGSUMEXP)
{
    int64_t s, i;
    for (s = 0; s < n; s++) {
        const double f = v[o + s];
        const double *x = v + a + s * b, *tx = t + a + s * b;
        double r = 0.0;
        for (i = 0; i < b; i++)
            if (tx[i] != 0.0)
                r += tx[i] * exp(x[i] - f);
        t[o + s] = r;
    }
}

/* ---- REDUCE_ALL, REDUCE_ANY: masks (0/1), no derivative. */
RT_FWD(REDUCE_ALL)
{
    int64_t s, i;
    for (s = 0; s < n; s++) {
        const double *x = v + a + s * b;
        double r = 1.0;
        for (i = 0; i < b; i++)
            if (x[i] == 0.0) {
                r = 0.0;
                break;
            }
        v[o + s] = r;
    }
}

RT_FWD(REDUCE_ANY)
{
    int64_t s, i;
    for (s = 0; s < n; s++) {
        const double *x = v + a + s * b;
        double r = 0.0;
        for (i = 0; i < b; i++)
            if (x[i] != 0.0) {      /* nan counts as true, as numpy */
                r = 1.0;
                break;
            }
        v[o + s] = r;
    }
}
