/* Special functions used by the generated expressions of ops_generated.h.
 *
 * Plain C99, thread-safe (no global state is written), values chosen to match
 * scipy.special / numpy, including at poles and infinities, so that the VM and
 * the numpy reference replay agree:
 *
 *   rt_gammaln(x)    log|Gamma(x)|           (lgamma_r; scipy: gammaln(-inf) = -inf)
 *   rt_digamma(x)    psi(x)                  psi(+0) = -inf, psi(-0) = +inf,
 *                                            psi(-k) = nan, psi(-inf) = nan, psi(inf) = inf
 *   rt_trigamma(x)   polygamma(1, x)         +inf at 0, -0, negative integers and -inf
 *   rt_tetragamma(x) polygamma(2, x)         -inf at 0, -0, negative integers and -inf,
 *                                            polygamma(2, inf) = -0.0
 *   rt_expit(x)      1 / (1 + exp(-x))        (never overflows)
 *   rt_log_expit(x)  log(expit(x))
 *   rt_logaddexp     numpy's npy_logaddexp, bit for bit
 *   rt_xlogy         scipy's xlogy: 0 when x == 0 and y is not nan
 *   rt_remainder     numpy's npy_remainder (the divisor's sign), bit for bit
 *   rt_erfcx         exp(x^2) erfc(x)         erfcx(inf) = 0, inf below -26.7
 *   rt_ndtr          standard normal CDF
 *   rt_log_ndtr      log ndtr, relative-accurate in both tails (and its derivative)
 *   rt_ndtri         inverse of ndtr          -inf at 0, inf at 1, nan outside [0, 1]
 *   rt_logit         log(p / (1 - p))
 *   rt_i0e, rt_i1e   exp(-|x|) I0(x), exp(-|x|) I1(x)
 *   rt_sinc          numpy's sinc (and its derivative, given f = sinc(x))
 *   rt_xlog1py       scipy's xlog1py: 0 when x == 0 and y is not nan
 *   rt_betaln        log|B(a, b)|, without the lgamma cancellation for large a
 *   rt_gammainc      regularised lower incomplete gamma P(a, x) (scipy's gammainc)
 *   rt_gammaincc     Q(a, x) = 1 - P(a, x), relative-accurate in its own tail
 *   rt_gammainc_dx   dP/dx = x^(a-1) e^-x / Gamma(a)
 *   rt_gamma, rt_rgamma, rt_gammasgn   Gamma, 1/Gamma and the sign of Gamma
 *   rt_j0, rt_j1, rt_y0, rt_y1         C's Bessel functions, scipy's edge values
 *   rt_jn, rt_yn     J_n(x), Y_n(x) of an integer order n (nan otherwise)
 *   rt_bessel_iv, rt_bessel_ive  I_v(x) and exp(-|x|) I_v(x) of a real order v
 */
#ifndef REVTAPE_SPECFUN_H
#define REVTAPE_SPECFUN_H

#include "kernels/vecmath.h"   /* rt_log1p: inline, vectorisable (the LOG1P row names it) */

double rt_gammaln(double x);
double rt_digamma(double x);
double rt_trigamma(double x);
double rt_tetragamma(double x);
double rt_expit(double x);
double rt_log_expit(double x);
double rt_logaddexp(double x, double y);
double rt_xlogy(double x, double y);
double rt_remainder(double x, double y);
double rt_erfcx(double x);
double rt_erfcx_deriv(double x, double f);
double rt_ndtr(double x);
double rt_log_ndtr(double x);
double rt_log_ndtr_deriv(double x);
double rt_ndtri(double p);
double rt_logit(double p);
double rt_i0e(double x);
double rt_i1e(double x);
double rt_sinc(double x);
double rt_sinc_deriv(double x, double f);
double rt_xlog1py(double x, double y);
double rt_betaln(double a, double b);
double rt_gammainc(double a, double x);
double rt_gammaincc(double a, double x);
double rt_gammainc_dx(double a, double x);
double rt_gamma(double x);
double rt_rgamma(double x);
double rt_gammasgn(double x);
double rt_j0(double x);
double rt_j1(double x);
double rt_y0(double x);
double rt_y1(double x);
double rt_jn(double n, double x);
double rt_yn(double n, double x);
double rt_bessel_ive(double v, double x);
double rt_bessel_iv(double v, double x);

#endif
