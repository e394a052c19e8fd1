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
#include "kernels/specfun.h"

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

double rt_remainder(double x, double y)
{
    /* numpy's npy_remainder (through npy_divmod), branch for branch: fmod is
     * exact, and a nonzero result whose sign differs from the divisor's is
     * moved into the divisor's half-open interval; a zero result takes the
     * divisor's sign.  y == 0 gives fmod's nan. */
    double mod = fmod(x, y);
    if (y == 0.0)
        return mod;
    if (mod != 0.0) {
        if ((y < 0.0) != (mod < 0.0))
            mod += y;
    }
    else
        mod = copysign(0.0, y);
    return mod;
}

/* ------------------------------------------------------------------ second wave
 * erfcx, ndtr, log_ndtr, ndtri, logit, i0e, i1e, sinc, xlog1py, betaln.
 * Written from the defining series, continued fractions and asymptotic
 * expansions (DLMF 7, 8, 10.40, 5.11); libm supplies erf/erfc/lgamma. */

#ifndef M_2_SQRTPI
#define M_2_SQRTPI 1.12837916709551257390
#endif
#ifndef M_SQRT1_2
#define M_SQRT1_2 0.70710678118654752440
#endif
#define RT_SQRT_2PI 2.50662827463100050242
#define RT_1_SQRT_2PI 0.39894228040143267794
#define RT_SQRT_PI_2 1.25331413731550025121   /* sqrt(pi / 2) */
#define RT_1_SQRTPI 0.56418958354775628695

/* exp(x * x) with x*x carried in two pieces: the rounding of x*x (relative
 * 2^-53, absolute up to ~700 * 2^-53 where exp still is finite) would
 * otherwise cost up to 1.5e-13 relative.  hi has 26 significant bits, so
 * hi*hi is exact. */
static double rt_exp_x2(double x)
{
    const double hi = (double)(float)x;    /* float has 24 bits: hi*hi exact */
    const double lo = x - hi;
    return exp(hi * hi) * exp(lo * (2.0 * hi + lo));
}

/* erfcx(x) = exp(x^2) erfc(x) for x >= 25: the asymptotic series
 * 1/(x sqrt(pi)) sum_k (-1)^k (2k-1)!! / (2x^2)^k (DLMF 7.12.1); its terms
 * shrink until k ~ x^2, and at x = 25 the 12th is below 1e-20. */
static double rt_erfcx_asym(double x)
{
    const double w = 1.0 / (2.0 * x * x);
    double term = 1.0, sum = 1.0;
    for (int k = 1; k <= 12; k++) {
        term *= -(2.0 * k - 1.0) * w;
        sum += term;
    }
    return sum * RT_1_SQRTPI / x;
}

double rt_erfcx(double x)
{
    if (isnan(x))
        return x;
    if (x >= 25.0)
        return x == INFINITY ? 0.0 : rt_erfcx_asym(x);
    if (x >= -0.5)
        return rt_exp_x2(x) * erfc(x);
    /* erfcx(x) = 2 exp(x^2) - erfcx(-x); overflows to inf below -26.6 */
    if (x < -26.7)
        return INFINITY;
    return 2.0 * rt_exp_x2(x) - rt_erfcx(-x);
}

/* erfcx'(x) = 2x erfcx(x) - 2/sqrt(pi).  From x = 2 on those terms cancel
 * (by ~2x^2: 1e-13 relative at x = 25), so there the derivative comes from
 * Laplace's continued fraction sqrt(pi) x erfcx(x) = x / (x + R),
 * R = (1/2) / (x + 1 / (x + (3/2) / (x + ...))): erfcx' = -(2/sqrt(pi)) R / (x + R),
 * with no cancellation; 60 terms converge to 1e-16 from x = 2 (checked
 * against mpmath). */
double rt_erfcx_deriv(double x, double f)
{
    if (!(x >= 2.0))
        return 2.0 * x * f - M_2_SQRTPI;
    double t = 0.0;
    for (int k = 60; k >= 1; k--)
        t = (0.5 * k) / (x + t);
    return -M_2_SQRTPI * t / (x + t);
}

double rt_ndtr(double x)
{
    /* Phi(x) = erfc(-x / sqrt 2) / 2, relative-accurate in the lower tail;
     * near 0, erf avoids erfc's loss of its leading 1. */
    const double z = x * M_SQRT1_2;
    if (fabs(z) < M_SQRT1_2)
        return 0.5 + 0.5 * erf(z);
    return 0.5 * erfc(-z);
}

double rt_log_ndtr(double x)
{
    /* x >= 0: log(1 - Phi(-x)), the small Phi(-x) through log1p.
     * x < 0: Phi(x) = exp(-x^2/2) erfcx(-x/sqrt 2) / 2, so the log is
     * -x^2/2 + log(erfcx(-x/sqrt 2) / 2): no underflow in either tail. */
    if (isnan(x))
        return x;
    if (x >= 0.0)
        return log1p(-rt_ndtr(-x));
    if (x == -INFINITY)
        return -INFINITY;
    return log(0.5 * rt_erfcx(-x * M_SQRT1_2)) - 0.5 * x * x;
}

/* d/dx log Phi(x) = phi(x) / Phi(x) = sqrt(2/pi) / erfcx(-x/sqrt 2):
 * finite for every x, tending to -x as x -> -inf and to 0 as x -> inf. */
double rt_log_ndtr_deriv(double x)
{
    if (x > 0.0) {
        /* phi(x) / (1 - Phi(-x)), with x^2 in two pieces: in erfcx(-x/sqrt 2)
         * the rounding of x/sqrt 2 would cost x^2 ulps (6e-14 at x = 30). */
        const double hi = (double)(float)x, lo = x - hi;
        const double phi = RT_1_SQRT_2PI * exp(-0.5 * (hi * hi)) * exp(-0.5 * lo * (2.0 * hi + lo));
        return phi / (1.0 - rt_ndtr(-x));
    }
    return (M_2_SQRTPI * M_SQRT1_2) / rt_erfcx(-x * M_SQRT1_2);
}

/* Phi^-1 on 0 < p <= 1/2: a rational first guess (Acklam's published
 * coefficients, relative error ~1e-9), then Halley steps on Phi(x) = p.
 * The residual is formed where it is exact enough: near the centre as
 * erf(x/sqrt 2)/2 - (p - 1/2) (p - 1/2 is exact), in the tail through
 * erfcx, and scaled by 1/phi(x) without overflow. */
static double rt_ndtri_lower(double p)
{
    static const double a[6] = {-3.969683028665376e+01, 2.209460984245205e+02,
                                -2.759285104469687e+02, 1.383577518672690e+02,
                                -3.066479806614716e+01, 2.506628277459239e+00};
    static const double b[5] = {-5.447609879822406e+01, 1.615858368580409e+02,
                                -1.556989798598866e+02, 6.680131188771972e+01,
                                -1.328068155288572e+01};
    static const double c[6] = {-7.784894002430293e-03, -3.223964580411365e-01,
                                -2.400758277161838e+00, -2.549732539343734e+00,
                                4.374664141464968e+00, 2.938163982698783e+00};
    static const double d[4] = {7.784695709041462e-03, 3.224671290700398e-01,
                                2.445134137142996e+00, 3.754408661907416e+00};
    double x;
    if (p < 0.02425) {
        const double q = sqrt(-2.0 * log(p));
        x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5])
            / ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
    } else {
        const double q = p - 0.5, r = q * q;
        x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q
            / (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0);
    }
    for (int it = 0; it < 3; it++) {
        double u;   /* (Phi(x) - p) / phi(x) */
        if (x > -1.0) {
            const double e = 0.5 * erf(x * M_SQRT1_2) - (p - 0.5);
            u = e * RT_SQRT_2PI * exp(0.5 * x * x);
        } else {
            /* Phi/phi = sqrt(pi/2) erfcx(-x/sqrt 2); p/phi = sqrt(2 pi) p e^{x^2/2},
             * the exponential split in halves so that it never overflows */
            const double t = exp(0.25 * x * x);
            u = RT_SQRT_PI_2 * rt_erfcx(-x * M_SQRT1_2) - RT_SQRT_2PI * ((p * t) * t);
        }
        const double step = u / (1.0 + 0.5 * x * u);   /* Halley: phi'/phi = -x */
        x -= step;
        if (fabs(step) <= 1e-17 * fabs(x))
            break;
    }
    return x;
}

double rt_ndtri(double p)
{
    if (isnan(p) || p < 0.0 || p > 1.0)
        return NAN;
    if (p == 0.0)
        return -INFINITY;
    if (p == 1.0)
        return INFINITY;
    if (p > 0.5)
        return -rt_ndtri_lower(1.0 - p);   /* 1 - p is exact here (Sterbenz) */
    if (p == 0.5)
        return 0.0;
    return rt_ndtri_lower(p);
}

double rt_logit(double p)
{
    /* log(p / (1 - p)); around 1/2, where the result is small, as
     * log1p(s) - log1p(-s) with s = 2p - 1 exact, so it stays relative-accurate. */
    if (p > 0.25 && p < 0.75) {
        const double s = 2.0 * p - 1.0;
        return log1p(s) - log1p(-s);
    }
    return log(p / (1.0 - p));
}

/* I_nu(x) e^-|x| for nu = 0, 1 and x >= 0.  Up to 20: the power series
 * sum (x^2/4)^k / (k! (k+nu)!) (DLMF 10.25.2; positive terms, no
 * cancellation).  Above: Hankel's asymptotic expansion (DLMF 10.40.1), whose
 * smallest term is ~e^-2x < 1e-17 there. */
static double rt_ive(int nu, double x)
{
    if (x <= 20.0) {
        const double q = 0.25 * x * x;
        double term = nu ? 0.5 * x : 1.0, sum = term;
        for (int k = 1; k < 200; k++) {
            term *= q / ((double)k * (double)(k + nu));
            sum += term;
            if (term < 1e-17 * sum)
                break;
        }
        return sum * exp(-x);
    } else {
        const double mu = 4.0 * nu * nu;
        double term = 1.0, sum = 1.0;
        for (int k = 1; k < 100; k++) {
            const double o = 2.0 * k - 1.0;
            const double next = -term * (mu - o * o) / (k * 8.0 * x);
            if (fabs(next) >= fabs(term))
                break;           /* the series has started to diverge */
            term = next;
            sum += term;
            if (fabs(term) < 1e-17 * fabs(sum))
                break;
        }
        return sum / sqrt(2.0 * M_PI * x);
    }
}

double rt_i0e(double x)
{
    if (isnan(x))
        return x;
    if (isinf(x))
        return 0.0;
    return rt_ive(0, fabs(x));
}

double rt_i1e(double x)
{
    if (isnan(x))
        return x;
    if (isinf(x))
        return copysign(0.0, x);
    return copysign(rt_ive(1, fabs(x)), x);
}

double rt_sinc(double x)
{
    /* numpy's sinc, operation for operation: sin(y) / y with y = pi * x
     * (x == 0 replaced by 1e-20, so sinc(0) = 1). */
    const double y = M_PI * (x == 0.0 ? 1.0e-20 : x);
    return sin(y) / y;
}

double rt_sinc_deriv(double x, double f)
{
    /* (cos(pi x) - sinc(x)) / x; for |pi x| < 1/4 its Taylor series
     * pi * sum_k (-1)^k 2k t^(2k-1) / (2k+1)!, t = pi x, which has no
     * cancellation (the next term is below 2e-18 relative). */
    const double t = M_PI * x;
    if (fabs(t) < 0.25) {
        const double t2 = t * t;
        return M_PI * t * (-1.0 / 3 + t2 * (1.0 / 30 + t2 * (-1.0 / 840 + t2 * (1.0 / 45360
               + t2 * (-1.0 / 3991680 + t2 * (1.0 / 518918400))))));
    }
    return (cos(t) - f) / x;
}

double rt_xlog1py(double x, double y)
{
    if (x == 0.0 && !isnan(y))
        return 0.0;
    return x * log1p(y);
}

/* lgamma(x) - ((x - 1/2) log x - x + log(2 pi)/2) for x >= 10: Stirling's
 * series (DLMF 5.11.1); the first omitted term is below 1e-17. */
static double rt_stirling_delta(double x)
{
    const double z = 1.0 / (x * x);
    return (1.0 / 12 + z * (-1.0 / 360 + z * (1.0 / 1260 + z * (-1.0 / 1680
            + z * (1.0 / 1188 + z * (-691.0 / 360360 + z * (1.0 / 156))))))) / x;
}

double rt_betaln(double a, double b)
{
    /* log|B(a, b)|.  With a >= b > 0 and a >= 10 the lgamma terms nearly
     * cancel, so the Stirling forms are subtracted analytically first: what
     * is left is small against the result (log(a/s) through log1p). */
    if (a < b) {
        const double t = a;
        a = b;
        b = t;
    }
    if (isnan(a) || isnan(b))
        return a + b;
    if (b > 0.0 && a >= 10.0 && !isinf(a)) {
        const double s = a + b;
        const double lr = -log1p(b / a);                  /* log(a / s) */
        if (b >= 10.0)
            return 0.5 * log(2.0 * M_PI) - 0.5 * log(s) + (a - 0.5) * lr
                   + (b - 0.5) * log(b / s)
                   + rt_stirling_delta(a) + rt_stirling_delta(b) - rt_stirling_delta(s);
        /* lgamma(a) - lgamma(s) = (a - 1/2) log(a/s) - b log s + b + delta(a) - delta(s) */
        return rt_gammaln(b) + ((a - 0.5) * lr + b) - b * log(s)
               + (rt_stirling_delta(a) - rt_stirling_delta(s));
    }
    return rt_gammaln(a) + rt_gammaln(b) - rt_gammaln(a + b);
}

/* log(1 + t) - t without cancellation for small t (series below |t| = 1/2). */
static double rt_log1pmx(double t)
{
    if (fabs(t) < 0.5) {
        double term = t, sum = 0.0;
        for (int k = 2; k < 80; k++) {
            term *= -t;
            const double c = term / k;          /* (-1)^(k+1) t^k / k */
            sum += c;
            if (fabs(c) < 1e-17 * fabs(sum))
                break;
        }
        return sum;
    }
    return log1p(t) - t;
}

/* log(x^a e^-x / Gamma(a)).  For a >= 10, in Stirling's form
 * a (log1p(t) - t) + log(a / (2 pi)) / 2 - delta(a), t = (x - a) / a: the
 * terms a log x, x and lgamma(a) nearly cancel near the mode, and would
 * leave an absolute error of ~1e-16 * a there. */
static double rt_igam_logfactor(double a, double x)
{
    if (a >= 10.0)
        return a * rt_log1pmx((x - a) / a) + 0.5 * log(a / (2.0 * M_PI)) - rt_stirling_delta(a);
    return a * log(x) - x - rt_gammaln(a);
}

/* P(a, x) by its power series (DLMF 8.7.1, x < a + 1), or Q(a, x) by
 * Legendre's continued fraction (DLMF 8.9.2, modified Lentz) otherwise;
 * each is relative-accurate in its own small tail, the other is 1 minus it. */
static void rt_igam(double a, double x, double *P, double *Q)
{
    const int max_iter = 100000;
    if (x < a + 1.0) {
        double term = 1.0 / a, sum = term;
        for (int n = 1; n < max_iter; n++) {
            term *= x / (a + n);
            sum += term;
            if (term < 1e-17 * sum)
                break;
        }
        *P = exp(rt_igam_logfactor(a, x)) * sum;
        *Q = 1.0 - *P;
    } else {
        const double tiny = 1e-300;
        double b = x + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, h = d;
        for (int n = 1; n < max_iter; n++) {
            const double an = -n * (n - a);
            b += 2.0;
            d = an * d + b;
            if (fabs(d) < tiny) d = tiny;
            c = b + an / c;
            if (fabs(c) < tiny) c = tiny;
            d = 1.0 / d;
            const double del = d * c;
            h *= del;
            if (fabs(del - 1.0) < 1e-16)
                break;
        }
        *Q = exp(rt_igam_logfactor(a, x)) * h;
        *P = 1.0 - *Q;
    }
}

double rt_gammainc(double a, double x)
{
    double P, Q;
    if (isnan(a) || isnan(x) || a < 0.0 || x < 0.0)
        return NAN;
    if (a == 0.0)
        return x > 0.0 ? 1.0 : NAN;
    if (x == 0.0)
        return 0.0;
    if (isinf(a))
        return isinf(x) ? NAN : 0.0;
    if (isinf(x))
        return 1.0;
    rt_igam(a, x, &P, &Q);
    return P;
}

double rt_gammaincc(double a, double x)
{
    double P, Q;
    if (isnan(a) || isnan(x) || a < 0.0 || x < 0.0)
        return NAN;
    if (a == 0.0)
        return x > 0.0 ? 0.0 : NAN;
    if (x == 0.0)
        return 1.0;
    if (isinf(a))
        return isinf(x) ? NAN : 1.0;
    if (isinf(x))
        return 0.0;
    rt_igam(a, x, &P, &Q);
    return Q;
}

/* d/dx P(a, x) = x^(a-1) e^-x / Gamma(a), the gamma density. */
double rt_gammainc_dx(double a, double x)
{
    if (x == 0.0)
        return a == 1.0 ? 1.0 : (a < 1.0 ? INFINITY : 0.0);
    return exp(rt_igam_logfactor(a, x)) / x;
}

/* ---------------------------------------------------------------- gamma and Bessel functions
 * scipy.special's values at the edges (checked by tests/numpy_api/test_special.py):
 * gamma: +-inf at +-0, nan at negative integers and -inf (C99 tgamma agrees);
 * rgamma = 1/gamma: 0 at the poles and both infinities; gammasgn: the sign of
 * gamma, nan at its poles below zero. */
double rt_gamma(double x)
{
    if (x == -INFINITY || (x < 0.0 && x == floor(x)))
        return NAN;
    return tgamma(x);
}

double rt_rgamma(double x)
{
    if (isnan(x))
        return x;
    if (isinf(x) || (x < 0.0 && x == floor(x)))
        return 0.0;
    if (x == 0.0)
        return x;                       /* signed zero, as scipy */
    /* 1/Gamma(x) = x / Gamma(x + 1): no overflow of Gamma near 0, and exact
     * scaling for subnormal x (1/tgamma(1e-310) would be 1/inf = 0). */
    if (fabs(x) < 1.0)
        return x / tgamma(x + 1.0);
    if (x > 170.0)
        return exp(-lgamma(x));       /* Gamma overflows; its reciprocal underflows gradually */
    return 1.0 / tgamma(x);
}

double rt_gammasgn(double x)
{
    if (isnan(x) || x == -INFINITY)
        return NAN;
    if (x == 0.0)
        return copysign(1.0, x);
    if (x > 0.0)
        return 1.0;
    if (x == floor(x))
        return NAN;
    /* Gamma is negative on (-1, 0), (-3, -2), ...: floor(x) odd */
    return fmod(floor(x), 2.0) == 0.0 ? 1.0 : -1.0;
}

/* C's (POSIX) Bessel functions of the first and second kind, with scipy's
 * values off their domain: nan at +-inf (scipy's j0(inf) is nan), y0/y1/yn
 * -inf at +-0 and nan below. */
double rt_j0(double x) { return isinf(x) ? NAN : j0(x); }
double rt_j1(double x) { return isinf(x) ? NAN : j1(x); }

double rt_y0(double x)
{
    if (x == 0.0)
        return -INFINITY;
    return (x < 0.0 || isinf(x)) ? NAN : y0(x);
}

double rt_y1(double x)
{
    if (x == 0.0)
        return -INFINITY;
    return (x < 0.0 || isinf(x)) ? NAN : y1(x);
}

/* J_n and Y_n of an integer order n (a non-integer or huge order is nan: the
 * recording refuses it). */
static int rt_int_order(double n, int *k)
{
    if (!(n == floor(n)) || fabs(n) > 1e6)
        return 0;
    *k = (int)n;
    return 1;
}

double rt_jn(double n, double x)
{
    int k;
    if (!rt_int_order(n, &k) || isnan(x) || isinf(x))
        return NAN;
    return jn(k, x);
}

double rt_yn(double n, double x)
{
    int k;
    if (!rt_int_order(n, &k) || isnan(x) || isinf(x) || x < 0.0)
        return NAN;
    if (x == 0.0) {
        /* Y_-k = (-1)^k Y_k */
        return (k < 0 && (k & 1)) ? INFINITY : -INFINITY;
    }
    return yn(k, x);
}

/* exp(-|x|) I_v(x) of a real order v: the power series
 * sum_k (x/2)^(2k+v) / (k! Gamma(k+v+1)) (DLMF 10.25.2) -- for v > -1 every
 * term is positive (no cancellation), and for x >= 0 and any order it
 * converges; its terms peak near k = x/2, so it runs while x is moderate.
 * The sum is carried scaled (each term relative to the first, rescaled
 * before it overflows) and the log of the first term, v log(x/2) -
 * lgamma(v+1) - x, is added at the end.  Above x = 1e4 Hankel's expansion
 * (DLMF 10.40.1) is accurate for the orders that can occur there (v^2 << x).
 * Negative x: I_v(-x) = (-1)^v I_v(x) for integer v, nan otherwise (scipy). */
static double rt_ive_pos(double v, double x)
{
    if (x == 0.0)
        return v == 0.0 ? 1.0 : 0.0;
    if (x > 1e4) {
        const double mu = 4.0 * v * v;
        double term = 1.0, sum = 1.0;
        for (int k = 1; k < 100; k++) {
            const double o = 2.0 * k - 1.0;
            const double next = -term * (mu - o * o) / (k * 8.0 * x);
            if (fabs(next) >= fabs(term))
                break;
            term = next;
            sum += term;
            if (fabs(term) < 1e-17 * fabs(sum))
                break;
        }
        return sum / sqrt(2.0 * M_PI * x);
    }
    const double q = 0.25 * x * x;
    double term = 1.0, sum = 1.0, logscale = 0.0;
    for (long k = 1; k < 200000; k++) {
        term *= q / ((double)k * ((double)k + v));
        sum += term;
        if (fabs(term) < 1e-17 * fabs(sum) && (double)k > 0.5 * x)
            break;
        if (fabs(sum) > 1e280) {
            sum *= 1e-280;
            term *= 1e-280;
            logscale += 280.0 * 2.302585092994046;
        }
    }
    int sg;
    const double lg = lgamma_r(v + 1.0, &sg);
    return sg * sum * exp(v * log(0.5 * x) - lg - x + logscale);
}

double rt_bessel_ive(double v, double x)
{
    if (isnan(v) || isnan(x))
        return NAN;
    if (isinf(x) || isinf(v))
        return NAN;
    if (v < 0.0 && v == floor(v))
        v = -v;                          /* I_-n = I_n */
    if (v < 0.0 && x == 0.0)
        return NAN;
    if (x < 0.0) {
        if (v != floor(v))
            return NAN;
        const double r = rt_ive_pos(v, -x);
        return fmod(v, 2.0) == 0.0 ? r : -r;
    }
    return rt_ive_pos(v, x);
}

double rt_bessel_iv(double v, double x)
{
    if (x == 0.0 && v < 0.0 && v != floor(v))
        return INFINITY;                 /* scipy's iv(-2.5, 0) */
    const double e = rt_bessel_ive(v, x);
    if (e == 0.0 || isnan(e))
        return e;
    return e * exp(fabs(x));
}
