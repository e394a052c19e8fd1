/* Special functions for the revtape VM (see specfun.h for the pole values).
 *
 * digamma, trigamma and tetragamma: upward recurrence to x >= 10, then the
 * asymptotic (Bernoulli) series.  For x < 0, digamma and tetragamma use the
 * reflection formula with an exact argument reduction of pi*x (x - round(x)
 * is exact): near their negative zeros it is more accurate than the
 * recurrence, whose terms +-1/(x+k)^m cancel there.  trigamma's recurrence
 * terms 1/(x+k)^2 are all positive (no cancellation, and near a pole -k the
 * dominant term comes from an exact difference), so it recurs down to -64
 * and reflects only below, to bound the work.
 */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE 1   /* lgamma_r */
#endif

#include <math.h>
#include "specfun.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif
#ifndef M_LN2
#define M_LN2 0.69314718055994530942
#endif

/* Below this, the polygammas switch from recurrence to reflection. */
#define RT_NEG_RECURRENCE_LIMIT (-64.0)
/* The asymptotic series is used from here up. */
#define RT_ASYMPTOTIC_FROM 10.0

double rt_gammaln(double x)
{
    int sign;
    /* scipy.special.gammaln(-inf) is -inf (glibc's lgamma gives +inf). */
    if (x == -INFINITY)
        return -INFINITY;
    return lgamma_r(x, &sign);
}

/* r = x - nearest integer, exact for every finite x (for |x| >= 2^52 x is an
 * integer and r = 0).  sin(pi x)^2 and cot(pi x) only depend on r. */
static double rt_frac_nearest(double x)
{
    return x - nearbyint(x);
}

/* cot(pi r) for 0 < |r| <= 0.5, accurate to a few ulps: the argument of tan
 * stays in [0, pi/4], where a rounded pi*r costs at most about one ulp. */
static double rt_cotpi_reduced(double r)
{
    double ar = fabs(r);
    double t;
    if (ar <= 0.25)
        return 1.0 / tan(M_PI * r);
    t = tan(M_PI * (0.5 - ar));          /* 0.5 - ar is exact (Sterbenz) */
    return r < 0 ? -t : t;
}

/* Asymptotic series at x >= 10.  Coefficients from B_2 .. B_20; the first
 * omitted term is below 1e-17 relative at x = 10. */
static double rt_digamma_asym(double x)
{
    /* psi(x) ~ log x - 1/(2x) - sum_k B_2k / (2k x^2k) */
    const double z = 1.0 / (x * x);
    const double s = z * (1.0 / 12 + z * (-1.0 / 120 + z * (1.0 / 252 + z * (-1.0 / 240
                   + z * (1.0 / 132 + z * (-691.0 / 32760 + z * (1.0 / 12
                   + z * (-3617.0 / 8160 + z * (43867.0 / 14364
                   + z * (-174611.0 / 6600))))))))));
    return log(x) - 0.5 / x - s;
}

static double rt_trigamma_asym(double x)
{
    /* psi1(x) ~ 1/x + 1/(2x^2) + sum_k B_2k / x^(2k+1) */
    const double t = 1.0 / x, z = t * t;
    const double p = 1.0 / 6 + z * (-1.0 / 30 + z * (1.0 / 42 + z * (-1.0 / 30
                   + z * (5.0 / 66 + z * (-691.0 / 2730 + z * (7.0 / 6
                   + z * (-3617.0 / 510 + z * (43867.0 / 798
                   + z * (-174611.0 / 330 + z * (854513.0 / 138))))))))));
    return t * (1.0 + t * (0.5 + t * p));
}

static double rt_tetragamma_asym(double x)
{
    /* psi2(x) ~ -(1/x^2 + 1/x^3 + sum_k (2k+1) B_2k / x^(2k+2)) */
    const double t = 1.0 / x, z = t * t;
    const double q = 0.5 + z * (-1.0 / 6 + z * (1.0 / 6 + z * (-3.0 / 10
                   + z * (5.0 / 6 + z * (-691.0 / 210 + z * (35.0 / 2
                   + z * (-3617.0 / 30 + z * (43867.0 / 42
                   + z * (-1222277.0 / 110 + z * (854513.0 / 6))))))))));
    return -(z * (1.0 + t + z * q));
}

double rt_digamma(double x)
{
    double acc = 0.0;
    if (isnan(x))
        return x;
    if (x == 0.0)
        return -copysign(INFINITY, x);   /* scipy: psi(+0) = -inf, psi(-0) = +inf */
    if (x < 0.0) {
        if (x == floor(x))
            return NAN;                  /* poles and -inf, as scipy */
        /* reflection: psi(x) = psi(1 - x) - pi cot(pi x); measured against
         * mpmath it beats the recurrence near the negative zeros of psi. */
            return rt_digamma(1.0 - x) - M_PI * rt_cotpi_reduced(rt_frac_nearest(x));
    }
    if (x == INFINITY)
        return x;
    while (x < RT_ASYMPTOTIC_FROM) {
        acc -= 1.0 / x;
        x += 1.0;
    }
    return rt_digamma_asym(x) + acc;
}

double rt_trigamma(double x)
{
    double acc = 0.0;
    if (isnan(x))
        return x;
    if (x <= 0.0 && x == floor(x))
        return INFINITY;                 /* 0, -0, negative integers, -inf (scipy) */
    if (x == INFINITY)
        return 0.0;
    if (x < RT_NEG_RECURRENCE_LIMIT) {
        /* reflection: psi1(x) = pi^2 / sin^2(pi x) - psi1(1 - x) */
        const double s = M_PI / sin(M_PI * rt_frac_nearest(x));
        return s * s - rt_trigamma(1.0 - x);
    }
    while (x < RT_ASYMPTOTIC_FROM) {
        const double t = 1.0 / x;
        acc += t * t;
        x += 1.0;
    }
    return rt_trigamma_asym(x) + acc;
}

double rt_tetragamma(double x)
{
    double acc = -0.0;                   /* keeps -0.0 for huge x, as scipy */
    if (isnan(x))
        return x;
    if (x <= 0.0 && x == floor(x))
        return -INFINITY;                /* 0, -0, negative integers, -inf (scipy) */
    if (x == INFINITY)
        return -0.0;
    if (x < 0.0) {
        /* reflection: psi2(x) = psi2(1 - x) - 2 pi^3 cot(pi x) / sin^2(pi x).
         * Unlike digamma and trigamma, tetragamma uses it on all of x < 0:
         * near its negative zeros (close to half-integers) the recurrence sums
         * terms of +-8 and more (absolute error ~1e-14) while here cot(pi x)
         * is small and both terms are accurate (absolute error ~1e-17). */
        const double r = rt_frac_nearest(x);
        const double s = sin(M_PI * r);
        return rt_tetragamma(1.0 - x)
               - 2.0 * M_PI * M_PI * M_PI * rt_cotpi_reduced(r) / (s * s);
    }
    while (x < RT_ASYMPTOTIC_FROM) {
        const double t = 1.0 / x;
        acc -= 2.0 * (t * t * t);
        x += 1.0;
    }
    return rt_tetragamma_asym(x) + acc;
}

double rt_expit(double x)
{
    /* Two branches so that exp never overflows; nan falls into the second. */
    if (x >= 0.0)
        return 1.0 / (1.0 + exp(-x));
    else {
        const double e = exp(x);
        return e / (1.0 + e);
    }
}

double rt_log_expit(double x)
{
    return x >= 0.0 ? -log1p(exp(-x)) : x - log1p(exp(x));
}

double rt_logaddexp(double x, double y)
{
    /* numpy's npy_logaddexp, branch for branch. */
    if (x == y)
        return x + M_LN2;                /* equal infinities without inf - inf */
    else {
        const double tmp = x - y;
        if (tmp > 0)
            return x + log1p(exp(-tmp));
        else if (tmp <= 0)
            return y + log1p(exp(tmp));
        return tmp;                      /* nan */
    }
}

double rt_xlogy(double x, double y)
{
    if (x == 0.0 && !isnan(y))
        return 0.0;
    return x * log(y);
}
