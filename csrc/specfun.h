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
 */
#ifndef REVTAPE_SPECFUN_H
#define REVTAPE_SPECFUN_H

double rt_gammaln(double x);
double rt_digamma(double x);
double rt_trigamma(double x);
double rt_tetragamma(double x);
double rt_expit(double x);
double rt_log_expit(double x);
double rt_logaddexp(double x, double y);
double rt_xlogy(double x, double y);

#endif
