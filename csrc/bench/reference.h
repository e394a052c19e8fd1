/* Hand-written value-and-gradient functions: the speed reference.
 *
 * "What a human would write in C at -O2" for each benchmark workload in
 * src/revtape/bench/workloads.py.  Each function returns the value and writes the
 * gradient into g.  All arrays are C-contiguous float64.
 *
 * This header is also fed to cffi's cdef (with '#' lines dropped), so it holds
 * plain prototypes only: no macros, no inline functions.
 */
#ifndef REVTAPE_REFERENCE_H
#define REVTAPE_REFERENCE_H

#include <stdint.h>

/* Non-centred eight schools, x = [mu, log_tau, eta_1..eta_8], g has 10 entries. */
double ref_eight_schools_vg(const double *x, double *g);

/* ref_eight_schools_vg at each of k rows of X (k x 10): values[k], G (k x 10).
 * The speed reference of batched replay: the loop runs in C, no per-row call
 * from Python. */
void ref_eight_schools_batch(const double *X, int64_t k, double *values, double *G);

/* sum_{i<n-1} 100*(x[i+1]-x[i]^2)^2 + (1-x[i])^2, x and g have n entries. */
double ref_rosenbrock_vg(const double *x, double *g, int64_t n);

/* Bayesian logistic regression with a N(0,1) prior:
 *   sum_i y_i*eta_i - log(1+exp(eta_i)) - 0.5*|beta|^2,  eta = X @ beta,
 * X is N x D row-major, y has N entries (0/1), beta and g have D entries. */
double ref_logreg_vg(const double *beta, double *g, const double *X, const double *y,
                     int64_t N, int64_t D);

/* Student-t robust regression (src/revtape/bench/workloads.py student_t):
 * x = [beta (D), sigma], g has D + 1 entries; X is N x D row-major, y has N
 * entries, nu the degrees of freedom.  One pass over the observations. */
double ref_student_t_vg(const double *x, double *g, const double *X, const double *y,
                        int64_t N, int64_t D, double nu);

/* y = x[0]; repeat L times: y = y + 0.001*sin(y + 0.1*k); returns y, g[0] = dy/dx0.
 * Forward pass stores the L intermediate y values in work (L doubles, caller
 * allocated), then a reverse sweep over them. */
double ref_chain_vg(const double *x, double *g, int64_t L, double *work);

/* Radon varying-intercept regression (src/revtape/bench/workloads.py radon):
 * x = [mu_a, beta, log sigma_a, log sigma_y, a_1..a_J], g has J + 4 entries;
 * y, floor have N entries, county (0..J-1) N entries; const is the sum of the
 * normalising constants. */
double ref_radon_vg(const double *x, double *g, const double *y, const int64_t *county,
                    const double *floor_, int64_t N, int64_t J, double cnst);

#endif
