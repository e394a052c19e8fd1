/* Standalone sanitizer harness for revtape's C VM (see tools/fuzz_vm.py).
 *
 * Reads seed programs written by fuzz_vm.py, mutates them (and makes random
 * ones), runs rt_verify on each, and runs every entry point on the programs
 * the verifier accepts, with every buffer malloc'ed to exactly the size the
 * ABI promises (vm.h), so that AddressSanitizer sees any read or write past
 * them.  Prints one line of counts.  Built with -fsanitize=address,undefined;
 * a finding aborts the process with the sanitizer's report.
 *
 * usage: fuzz_vm_harness SEEDS_FILE RNG_SEED ITERATIONS
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vm.h"

typedef struct {
    int64_t hdr[8];          /* n_instr n_ints n_vals n_in n_grad n_fixed out_off out_len */
    int32_t *code, *ints;
    double *consts;
} seed_t;

static uint64_t rng_state;
static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    return rng_state = x;
}
static int64_t below(int64_t n) { return n > 0 ? (int64_t)(rnd() % (uint64_t)n) : 0; }

/* Values that hit boundaries: small offsets, lengths near the arena, sign bits. */
static int32_t interesting(int64_t n_vals)
{
    static const int32_t fixed[] = {0, 1, 2, 3, -1, -2, 6, 7, 8, 16, 0x10000, 0x70000,
                                    INT32_MAX, INT32_MIN, INT32_MAX - 1, 0x7fff, 0xffff};
    switch (below(4)) {
    case 0: return fixed[below(sizeof fixed / sizeof fixed[0])];
    case 1: return (int32_t)(n_vals + below(5) - 2);
    case 2: return (int32_t)below(n_vals + 2);
    default: return (int32_t)rnd();
    }
}

static int read_seeds(const char *path, seed_t **out)
{
    FILE *f = fopen(path, "rb");
    int64_t count, i;
    seed_t *s;
    if (f == NULL || fread(&count, sizeof count, 1, f) != 1)
        return -1;
    s = calloc((size_t)count, sizeof *s);
    for (i = 0; i < count; i++) {
        int64_t n_consts;
        if (fread(s[i].hdr, sizeof(int64_t), 8, f) != 8)
            return -1;
        n_consts = s[i].hdr[5] - s[i].hdr[3];
        s[i].code = malloc((size_t)(s[i].hdr[0] * RT_WORDS + 1) * sizeof(int32_t));
        s[i].ints = malloc((size_t)(s[i].hdr[1] + 1) * sizeof(int32_t));
        s[i].consts = malloc((size_t)(n_consts + 1) * sizeof(double));
        if (fread(s[i].code, sizeof(int32_t), (size_t)(s[i].hdr[0] * RT_WORDS), f)
                != (size_t)(s[i].hdr[0] * RT_WORDS)
            || fread(s[i].ints, sizeof(int32_t), (size_t)s[i].hdr[1], f) != (size_t)s[i].hdr[1]
            || fread(s[i].consts, sizeof(double), (size_t)n_consts, f) != (size_t)n_consts)
            return -1;
    }
    fclose(f);
    *out = s;
    return (int)count;
}

/* exactly n doubles (at least one byte allocated so that a pointer exists) */
static double *dbuf(int64_t n, int fill)
{
    double *d = malloc(n > 0 ? (size_t)n * sizeof(double) : 1);
    int64_t i;
    for (i = 0; i < n; i++) {
        const int64_t r = below(64);
        d[i] = !fill ? 0.0 : r == 0 ? NAN : r == 1 ? INFINITY : r == 2 ? -INFINITY
             : r == 3 ? 0.0 : ((double)below(2000) - 1000.0) / 250.0;
    }
    return d;
}

enum { E_FWD, E_REPORT, E_VG, E_VJP, E_JAC, E_JVP, E_JACF, E_READ, E_BVG, E_BFWD, E_BWIDE,
       E_N };
static const char *e_names[E_N] = {"forward", "forward_report", "value_and_grad", "vjp",
                                   "jacobian", "jvp", "jacobian_fwd", "read_io",
                                   "batch_value_and_grad", "batch_forward", "batch_wide"};
static long long counts[E_N][8];

static void run_all(rt_program *p)
{
    const int64_t n_in = p->n_in, n_grad = p->n_grad, m = p->out_len;
    double *x = dbuf(n_in, 1), *xd = dbuf(n_grad, 1), *w = dbuf(m, 1);
    double *y = dbuf(m, 0), *g = dbuf(n_grad, 0), *val = dbuf(1, 0);
    rt_report rep;
    int st;
#define COUNT(e, s) counts[e][(s) >= 0 && (s) < 8 ? (s) : 7]++
    st = rt_forward(p, x, y); COUNT(E_FWD, st);
    st = rt_forward(p, NULL, NULL); COUNT(E_FWD, st);
    st = rt_forward_report(p, x, y, below(p->n_vals + 2) - 1, &rep); COUNT(E_REPORT, st);
    st = rt_value_and_grad(p, x, val, g); COUNT(E_VG, st);
    st = rt_vjp(p, x, w, y, g); COUNT(E_VJP, st);
    st = rt_jvp(p, x, xd, y, w); COUNT(E_JVP, st);
    if (m * n_grad <= (1 << 16) && (m + n_grad) * p->n_instr <= (1 << 22)) {
        double *J = dbuf(m * n_grad, 0);
        st = rt_jacobian(p, x, y, J); COUNT(E_JAC, st);
        st = rt_jacobian_fwd(p, x, y, J); COUNT(E_JACF, st);
        free(J);
    }
    st = rt_read_io(p, x, y); COUNT(E_READ, st);
    {   /* batched replay of k rows; a B = 1 "wide" program is the program itself */
        const int64_t k = 1 + below(3);
        double *X = dbuf(k * n_in, 1), *V = dbuf(k, 0), *G = dbuf(k * n_grad, 0);
        double *Y = dbuf(k * m, 0);
        int64_t row;
        st = rt_batch_value_and_grad(p, k, X, V, G, &row); COUNT(E_BVG, st);
        st = rt_batch_forward(p, k, X, Y, &row); COUNT(E_BFWD, st);
        {   /* the program as its own wide form: soa.c's checks refuse it
             * unless every instruction has RT_SOA_LANES elements; random side
             * tables (first: any bits; zero: offsets that may be bad) */
            uint8_t *first = (uint8_t *)malloc((size_t)p->n_instr + 1);
            int32_t zero[2];
            int64_t i, L = RT_SOA_LANES;
            for (i = 0; i < p->n_instr; i++)
                first[i] = (uint8_t)below(8);
            zero[0] = (int32_t)(L * below(p->n_vals / L + 2)) - (int32_t)below(2);
            zero[1] = (int32_t)below(p->n_vals + 1);
            st = rt_batch_soa(p, n_in / L, n_grad / L, p->out_off / L, (int32_t)below(2), first,
                              zero, below(3), k, X, V, G, &row);
            COUNT(E_BWIDE, st);
            free(first);
        }
        free(X); free(V); free(G); free(Y);
    }
    free(x); free(xd); free(w); free(y); free(g); free(val);
}

int main(int argc, char **argv)
{
    seed_t *seeds;
    int n_seeds, k;
    long long iters, it, verified = 0, refused = 0, skipped = 0, random_progs = 0;
    const int64_t max_vals = 1 << 14;       /* arenas the harness is willing to allocate */
    char msg[256];
    if (argc != 4) {
        fprintf(stderr, "usage: %s SEEDS RNG_SEED ITERATIONS\n", argv[0]);
        return 2;
    }
    n_seeds = read_seeds(argv[1], &seeds);
    if (n_seeds <= 0) {
        fprintf(stderr, "cannot read seeds from %s\n", argv[1]);
        return 2;
    }
    rng_state = strtoull(argv[2], NULL, 10) * 2654435761u + 88172645463325252ull;
    iters = atoll(argv[3]);
    for (it = 0; it < iters; it++) {
        const seed_t *s = &seeds[below(n_seeds)];
        int64_t h[8], i, n_code, n_consts, n_mut;
        int32_t *code, *ints;
        double *vals, *adj;
        rt_program *p;
        memcpy(h, s->hdr, sizeof h);
        if (below(8) == 0) {                 /* a random program around a random header */
            random_progs++;
            h[0] = 1 + below(12); h[1] = below(12); h[2] = below(40);
            h[3] = below(h[2] + 1); h[4] = below(h[3] + 1); h[5] = h[3] + below(h[2] - h[3] + 1);
            h[6] = below(h[2] + 1); h[7] = below(h[2] - h[6] + 1);
        }
        n_code = h[0] * RT_WORDS;
        code = malloc((size_t)(n_code > 0 ? n_code : 1) * sizeof(int32_t));
        ints = malloc((size_t)(h[1] > 0 ? h[1] : 1) * sizeof(int32_t));
        for (i = 0; i < n_code; i++)
            code[i] = i < s->hdr[0] * RT_WORDS && h[0] == s->hdr[0] ? s->code[i] : interesting(h[2]);
        for (i = 0; i < h[1]; i++)
            ints[i] = i < s->hdr[1] && h[1] == s->hdr[1] ? s->ints[i] : (int32_t)below(h[2] + 2) - 1;
        n_mut = 1 + below(6);
        for (k = 0; k < n_mut; k++) {
            const int64_t what = below(10);
            if (what < 6 && n_code > 0)
                code[below(n_code)] = interesting(h[2]);
            else if (what < 8 && h[1] > 0)
                ints[below(h[1])] = interesting(h[2]);
            else {                             /* a header field, within what we allocate */
                const int64_t f = 2 + below(6);
                h[f] = below(3) == 0 ? (int64_t)interesting(h[2]) : h[f] + below(5) - 2;
            }
        }
        if (h[2] < 0 || h[2] > max_vals) {    /* nothing to allocate: the verifier alone */
            rt_program q;
            memset(&q, 0, sizeof q);
            q.code = code; q.n_instr = h[0]; q.ints = ints; q.n_ints = h[1];
            q.n_vals = h[2]; q.n_in = h[3]; q.n_grad = h[4]; q.n_fixed = h[5];
            q.out_off = h[6]; q.out_len = h[7];
            q.vals = NULL; q.adj = NULL;
            if (rt_verify(&q, msg, sizeof msg) == RT_OK) {
                fprintf(stderr, "accepted a program with n_vals %lld and no arena\n", (long long)h[2]);
                abort();
            }
            skipped++;
            free(code); free(ints);
            continue;
        }
        vals = dbuf(h[2], 0);
        adj = dbuf(h[2], 0);
        n_consts = s->hdr[5] - s->hdr[3];
        for (i = 0; i < n_consts && h[3] + i < h[2] && h[3] + i >= 0; i++)
            vals[h[3] + i] = s->consts[i];
        p = calloc(1, sizeof *p);
        p->code = code; p->n_instr = h[0]; p->ints = ints; p->n_ints = h[1];
        p->vals = vals; p->adj = adj; p->n_vals = h[2];
        p->n_in = h[3]; p->n_grad = h[4]; p->n_fixed = h[5]; p->out_off = h[6]; p->out_len = h[7];
        if (rt_verify(p, msg, sizeof msg) == RT_OK) {
            verified++;
            run_all(p);
        } else {
            refused++;
            /* an unverified program is never run: every entry point says so */
            if (rt_forward(p, NULL, NULL) != RT_UNVERIFIED) {
                fprintf(stderr, "an entry point ran a refused program\n");
                abort();
            }
        }
        free(p); free(vals); free(adj); free(code); free(ints);
    }
    printf("{\"iterations\": %lld, \"random_programs\": %lld, \"verified\": %lld, "
           "\"refused\": %lld, \"verifier_only\": %lld, \"calls\": {",
           iters, random_progs, verified, refused, skipped);
    for (k = 0; k < E_N; k++)
        printf("%s\"%s\": [%lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld]", k ? ", " : "",
               e_names[k], counts[k][0], counts[k][1], counts[k][2], counts[k][3], counts[k][4],
               counts[k][5], counts[k][6], counts[k][7]);
    printf("}}\n");
    for (k = 0; k < n_seeds; k++) {
        free(seeds[k].code); free(seeds[k].ints); free(seeds[k].consts);
    }
    free(seeds);
    return 0;
}
