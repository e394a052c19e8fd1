/* BLOCK / ENDBLOCK: a fused, tiled run of elementwise instructions.
 *
 *   BLOCK    n, out = m, a = T, b = s0, c = mask
 *   m member instructions, each elementwise over the same n elements
 *   ENDBLOCK the same words
 * (both carry adjoint flag 1 when a member has reverse or tangent work).
 *
 * Tile-local results.  Bit k of mask: member k's result is read by nobody
 * but later members of the block, so it never gets an arena region of n
 * elements: it lives in a slot of T elements of the block's scratch,
 * [s0 + r*T, s0 + r*T + T) for the r-th such member, and every member word
 * naming it holds that slot's offset (not shifted per tile).  The reverse
 * and tangent sweeps recompute tile by tile (the same expressions: the same
 * bits) those of them some member's reverse or tangent reads (vm/blocks.c,
 * rt_block_recompute: SQUARE's reverse reads its operand, not its result),
 * and the slots' adjoints start each tile at zero: in the reverse sweep the
 * first term into a slot is written as 0.0 + term (kernels.h, RT_KSET_*),
 * the other slots are zeroed.  The arena then holds neither their values
 * nor their adjoints: no pass over memory writes, zeroes or reads them
 * back, which is most of the memory traffic of an elementwise-heavy program.
 * blocks.py starts the scratch and the members' kept results on 64-byte
 * lines (the arenas are aligned: compiled._aligned_zeros).
 *
 * numpy (and the VM without blocks) makes one pass over memory per
 * instruction; a block runs all m members over elements [t, t + T) before
 * moving to the next tile, so a member's operands, written a moment before
 * by an earlier member, are still in L1 (numexpr's blocking, XLA's loop
 * fusion, interpreted).  The forward sweep runs the block from BLOCK and
 * jumps past ENDBLOCK; the reverse sweep runs the members' reverses, last
 * member first within each tile, from ENDBLOCK and jumps past BLOCK.  The
 * tangent sweep runs the members' tangents tile by tile, in order.
 *
 * Why the bits do not change.  Every member is elementwise (isa.py's
 * `blockable`), so a member over one tile computes exactly its elements of
 * the full instruction, with the same C expression.  What the verifier
 * checks below makes the tiled order compute the same thing:
 *   - a member reads an earlier member's output only as that whole region
 *     (same offset): element i of it was written in the same tile, before;
 *   - every other operand (array or one element) lies outside every
 *     member's output: nothing the block writes is read across tiles;
 *   - member outputs do not overlap each other;
 *   - a one-element operand never needs an adjoint: its adjoint is a sum
 *     over all n elements, which tiling would round differently.
 * Adjoints of array operands are accumulated per element; per slot, the
 * order of contributions across members must stay the unfused one, which
 * depends on offsets and tile boundaries: the compiler checks it when it
 * forms a block (src/revtape/lower/blocks.py), the verifier checks memory
 * safety and the rules above.
 *
 * Members of a block run only through it: every sweep runs the block as a
 * whole (the VM's range entry points refuse a range that cuts one), and the
 * verifier checks each member as its first and its last tile run it.
 * The sweeps' cases are in vm/sweeps.c and vm/blocks.c (they run the sweep itself over the member
 * words of one tile); this file holds the tiling and the verify functions.
 *
 * A sum block's last member word is a REDUCE_SUM of one earlier member's
 * whole result (rt_block_init below: it is not one of the m members the
 * tiles run, and its tiles are the pairwise summation's subtrees).
 */

/* Most members one block may hold (the tile's words live on the stack; the
 * mask is one int32 word). */
#define RT_BLOCK_MAX 30

/* Per opcode: which of the words out, a, b, c are arrays of n elements
 * (bit 0: out, 1: a, 2: b, 3: c), i.e. shift by the tile's start. */
#define RT_BLK_SHIFT_(NAME, N, OUT, A, B, C, ...)                             \
    [RT_OP_##NAME] = (uint8_t)((RT_W_##OUT == RT_W_N) | ((RT_W_##A == RT_W_N) << 1) \
                               | ((RT_W_##B == RT_W_N) << 2) | ((RT_W_##C == RT_W_N) << 3)),
static const uint8_t rt_block_shift[RT_NUM_OPS] = { RT_INSTRS(RT_BLK_SHIFT_) };
#undef RT_BLK_SHIFT_

/* Per opcode: which of a, b, c are arena operands (bit 1: a, 2: b, 3: c). */
#define RT_BLK_USED_(NAME, N, OUT, A, B, C, ...)                              \
    [RT_OP_##NAME] = (uint8_t)(((RT_W_##A != RT_W_NONE) << 1) | ((RT_W_##B != RT_W_NONE) << 2) \
                               | ((RT_W_##C != RT_W_NONE) << 3)),
static const uint8_t rt_block_used[RT_NUM_OPS] = { RT_INSTRS(RT_BLK_USED_) };
#undef RT_BLK_USED_

#define RT_BLK_MEMBER_(NAME) [RT_OP_##NAME] = 1,
static const uint8_t rt_block_member[RT_NUM_OPS] = { RT_BLOCKABLE(RT_BLK_MEMBER_) };
#undef RT_BLK_MEMBER_

/* One block, from its BLOCK words w (verified). */
typedef struct {
    const int32_t *mem;     /* the member words */
    int64_t n, m, T;
    int64_t s0, s1;         /* the scratch [s0, s1): one T-slot per tile-local member */
    uint32_t mask;          /* bit k: member k's result is tile-local */
    const int32_t *sum;     /* a sum block's closing REDUCE_SUM (NULL: none; m excludes it) */
} rt_block;

static inline int rt_block_popcount(uint32_t x)
{
    int k = 0;
    for (; x; x &= x - 1)
        k++;
    return k;
}

static inline void rt_block_init(rt_block *bk, const int32_t *w)
{
    bk->mem = w + RT_WORDS;
    bk->n = w[1]; bk->m = w[2]; bk->T = w[3];
    bk->mask = (uint32_t)w[5];
    bk->s0 = bk->mask ? w[4] : 0;
    bk->s1 = bk->s0 + (int64_t)rt_block_popcount(bk->mask) * bk->T;
    bk->sum = NULL;
    if (bk->m >= 2 && (bk->mem[(bk->m - 1) * RT_WORDS] & RT_OPCODE_MASK) == RT_OP_REDUCE_SUM) {
        bk->sum = bk->mem + (bk->m - 1) * RT_WORDS;
        bk->m--;
    }
}

/* A sum block: the last member is np.sum of an earlier member's whole
 * result (REDUCE_SUM, one segment of n), so that result need not go
 * through the arena (it may be tile-local) nor its adjoint be zeroed and
 * filled with the sum's adjoint in a pass of its own.  The tiles are then
 * the subtrees of numpy's pairwise summation (kernels.c rt_k_pairwise_sum:
 * n > 128 splits at n / 2 rounded down to a multiple of 8) that hold at
 * most T elements, the largest such: each tile's sum is the kernel's sum of
 * that subtree, and the forward adds the tiles' sums as the recursion adds
 * its halves, so the result has the unfused sum's bits.  T >= 128 (the
 * verifier's rule) keeps every split above a tile numpy's own split. */
#define RT_BLOCK_SUM_MIN_T 128

static inline int64_t rt_block_split(int64_t n)
{
    const int64_t n2 = n / 2;
    return n2 - n2 % 8;
}

/* The length of the tile that starts at element t (t: a tile's start). */
static inline int64_t rt_block_tile_len(const rt_block *bk, int64_t t)
{
    int64_t lo = 0, n = bk->n;
    if (bk->sum == NULL)
        return n - t < bk->T ? n - t : bk->T;
    while (n > bk->T) {
        const int64_t n2 = rt_block_split(n);
        if (t < lo + n2)
            n = n2;
        else {
            lo += n2;
            n -= n2;
        }
    }
    return n;
}

/* The tiles in ascending order: the subtrees still to visit on a stack
 * (each split pops one and pushes two: at most 64 deep for n < 2^63),
 * which costs less per tile than descending from the root each time. */
typedef struct {
    int64_t lo[64], n[64];
    int top;
} rt_block_tiles;

static inline void rt_block_tiles_init(const rt_block *bk, rt_block_tiles *it)
{
    it->lo[0] = 0;
    it->n[0] = bk->n;
    it->top = bk->n > 0;
}

/* The next tile's length (its start: the previous tile's end), 0 at the end. */
static inline int64_t rt_block_tiles_next(const rt_block *bk, rt_block_tiles *it, int64_t t)
{
    if (bk->sum == NULL)
        return t < bk->n ? (bk->n - t < bk->T ? bk->n - t : bk->T) : 0;
    while (it->top > 0) {
        const int k = --it->top;
        const int64_t lo = it->lo[k], n = it->n[k], n2 = rt_block_split(n);
        if (n <= bk->T)
            return n;
        it->lo[k] = lo + n2;                /* the right half, then the left on top */
        it->n[k] = n - n2;
        it->lo[k + 1] = lo;
        it->n[k + 1] = n2;
        it->top = k + 2;
    }
    return 0;
}

/* The start of a sum block's last tile. */
static inline int64_t rt_block_last_tile(const rt_block *bk)
{
    int64_t lo = 0, n = bk->n;
    while (n > bk->T) {
        const int64_t n2 = rt_block_split(n);
        lo += n2;
        n -= n2;
    }
    return lo;
}

/* The words of the members in `pick` (bit k: member k) restricted to
 * elements [t, t + len), written into buf; returns how many.  Array words
 * shift by t, except those naming a scratch slot. */
static inline int64_t rt_block_tile(const rt_block *bk, int64_t t, int64_t len, uint32_t pick,
                                    int32_t *buf)
{
    int64_t k, j, cnt = 0;
    for (k = 0; k < bk->m; k++) {
        const int32_t *w = bk->mem + k * RT_WORDS;
        int32_t *u = buf + cnt * RT_WORDS;
        const uint8_t sh = rt_block_shift[w[0] & RT_OPCODE_MASK];
        if (!((pick >> k) & 1))
            continue;
        u[0] = w[0];
        u[1] = (int32_t)len;
        for (j = 0; j < 4; j++) {
            const int64_t x = w[2 + j];
            u[2 + j] = ((sh >> j) & 1) && !(x >= bk->s0 && x < bk->s1) ? (int32_t)(x + t)
                                                                        : (int32_t)x;
        }
        cnt++;
    }
    return cnt;
}

/* A block's member words decoded once per run: tile 0's words and which
 * of them move with the tile (-1: shifts by the tile's start, 0: fixed),
 * so a tile's words cost one add a word instead of the decoding above
 * (it ran per tile and per sweep, a fifth of a block's time at n = 1e4). */
typedef struct {
    int32_t base[RT_BLOCK_MAX * RT_WORDS];
    int32_t step[RT_BLOCK_MAX * RT_WORDS];
    int64_t cnt;
} rt_block_plan;

static inline void rt_block_plan_init(const rt_block *bk, uint32_t pick, rt_block_plan *pl)
{
    int64_t k, j;
    pl->cnt = rt_block_tile(bk, 0, bk->T, pick, pl->base);
    (void)rt_block_tile(bk, 1, bk->T, pick, pl->step);
    for (k = 0; k < pl->cnt * RT_WORDS; k++)
        pl->step[k] = pl->step[k] != pl->base[k] ? -1 : 0;
    for (k = 0; k < pl->cnt; k++)
        for (j = 0; j < 2; j++)
            pl->step[k * RT_WORDS + j] = 0;             /* op and length never shift */
}

/* Tile [t, t + len)'s words into buf (the plan's count of members). */
static inline void rt_block_plan_at(const rt_block_plan *pl, int64_t t, int64_t len, int32_t *buf)
{
    const int32_t t32 = (int32_t)t;
    int64_t k;
    for (k = 0; k < pl->cnt * RT_WORDS; k++)
        buf[k] = pl->base[k] + (pl->step[k] & t32);
    for (k = 0; k < pl->cnt; k++)
        buf[k * RT_WORDS + 1] = (int32_t)len;
}

/* Moves the plan's words naming the scratch by sub elements (a thread's
 * share of each tile-local slot, vm/blocks.c rt_block_par); sub = 0 leaves it. */
static inline void rt_block_plan_sub(const rt_block *bk, rt_block_plan *pl, int64_t sub)
{
    int64_t k, j;
    if (sub == 0)
        return;
    for (k = 0; k < pl->cnt; k++) {
        int32_t *u = pl->base + k * RT_WORDS;
        const uint8_t sh = rt_block_shift[u[0] & RT_OPCODE_MASK];
        for (j = 0; j < 4; j++)
            if (((sh >> j) & 1) && u[2 + j] >= bk->s0 && u[2 + j] < bk->s1)
                u[2 + j] = (int32_t)(u[2 + j] + sub);
    }
}

static inline int rt_block_overlaps(int64_t o1, int64_t l1, int64_t o2, int64_t l2)
{
    return l1 > 0 && l2 > 0 && o1 < o2 + l2 && o2 < o1 + l1;
}

/* A sum block's REDUCE_SUM (the last member word): one segment of the
 * block's n elements of an earlier member's whole result, its adjoint
 * flag the only one; its one-element result outside the scratch and
 * everything the other members read or write (the forward writes it after
 * the last tile, the reverse reads its adjoint before the first).  Then
 * the word itself, its operand being the member's region (a slot: T
 * elements). */
static inline int rt_block_verify_sum(rt_vctx *vc, const rt_block *bk)
{
    const int32_t *u = bk->sum;
    const int64_t n = bk->n, o = u[2];
    int32_t word[RT_WORDS];
    int64_t i, j, src = -1;
    if ((bk->mask >> bk->m) & 1)
        return rt_vfail(vc, "the closing sum's result is marked tile-local");
    if (bk->T < RT_BLOCK_SUM_MIN_T)
        return rt_vfail(vc, "a block closed by a sum needs tiles of >= %d elements, not %lld",
                        RT_BLOCK_SUM_MIN_T, (long long)bk->T);
    if (u[0] < 0 || ((uint32_t)u[0] >> RT_FLAGS_SHIFT) & ~1u)
        return rt_vfail(vc, "the closing sum's op word 0x%08lx has flags beyond bit 0",
                        (unsigned long)(uint32_t)u[0]);
    if (u[1] != 1 || u[4] != n)
        return rt_vfail(vc, "the closing sum is %lld segments of %lld elements, not one of %lld",
                        (long long)u[1], (long long)u[4], (long long)n);
    for (i = 0; i < bk->m; i++)
        if (bk->mem[i * RT_WORDS + 2] == u[3])
            src = i;
    if (src < 0)
        return rt_vfail(vc, "the closing sum reads @%lld, not a member's whole result",
                        (long long)u[3]);
    if (rt_block_overlaps(o, 1, bk->s0, bk->s1 - bk->s0))
        return rt_vfail(vc, "the closing sum's result lies in the scratch");
    for (i = 0; i < bk->m; i++) {
        const int32_t *v = bk->mem + i * RT_WORDS;
        const int32_t op = v[0] & RT_OPCODE_MASK;
        if (op < 0 || op >= RT_NUM_OPS)
            continue;                       /* refused with the members */
        if (rt_block_overlaps(v[2], (bk->mask >> i) & 1 ? 0 : n, o, 1))
            return rt_vfail(vc, "the closing sum's result overlaps member %lld's",
                            (long long)i);
        for (j = 1; j < 4; j++)           /* (a slot operand: the scratch, checked above) */
            if (((rt_block_used[op] >> j) & 1)
                && !(v[2 + j] >= bk->s0 && v[2 + j] < bk->s1)
                && rt_block_overlaps(v[2 + j], (rt_block_shift[op] >> j) & 1 ? n : 1, o, 1))
                return rt_vfail(vc, "member %lld reads the closing sum's result",
                                (long long)i);
    }
    for (j = 0; j < RT_WORDS; j++)
        word[j] = u[j];
    word[4] = (int32_t)((bk->mask >> src) & 1 ? bk->T : n);
    return rt_verify_instr(vc, word);
}

/* The block's own words, its members' kinds and dataflow, its scratch and
 * its ENDBLOCK.  (vm/verify.c then checks each member's regions as its first and
 * last tile see them: rt_verify_block_members.) */
RT_VERIFY_FN(BLOCK)
{
    const rt_program *p = vc->p;
    const int64_t pc = vc->pc, n = w[1], m = w[2], T = w[3];
    const int32_t *e;
    rt_block bk;
    int64_t k, j, i, slot;
    (void)len;
    if (m < 1 || m > RT_BLOCK_MAX)
        return rt_vfail(vc, "member count %lld is not in 1 .. %d", (long long)m, RT_BLOCK_MAX);
    if (T < 1)
        return rt_vfail(vc, "tile %lld must be >= 1", (long long)T);
    if ((uint32_t)w[5] >> m)
        return rt_vfail(vc, "mask 0x%x names members beyond the %lld", (unsigned)w[5],
                        (long long)m);
    if (w[5] == 0 && w[4] != 0)
        return rt_vfail(vc, "scratch offset %lld without tile-local members", (long long)w[4]);
    if (pc + m + 1 >= p->n_instr)
        return rt_vfail(vc, "its %lld members and ENDBLOCK run past the program's end",
                        (long long)m);
    e = w + (m + 1) * RT_WORDS;
    if ((e[0] & RT_OPCODE_MASK) != RT_OP_ENDBLOCK || e[1] != w[1] || e[2] != w[2]
        || e[3] != w[3] || e[4] != w[4] || e[5] != w[5])
        return rt_vfail(vc, "instruction %lld is not the ENDBLOCK with the same words",
                        (long long)(pc + m + 1));
    rt_block_init(&bk, w);
    if (bk.mask && !rt_vregion(vc, "scratch", bk.s0, bk.s1 - bk.s0, 1))
        return 0;
    if (bk.sum != NULL && !rt_block_verify_sum(vc, &bk))
        return 0;
    for (k = 0, slot = bk.s0; k < bk.m; k++) {
        const int32_t *u = bk.mem + k * RT_WORDS;
        const int32_t op = u[0] & RT_OPCODE_MASK;
        const int local = (bk.mask >> k) & 1;
        uint8_t sh;
        uint32_t fl;
        if (u[0] < 0 || op >= RT_NUM_OPS || !rt_block_member[op])
            return rt_vfail(vc, "member %lld (instruction %lld) is not an elementwise "
                            "instruction a block may hold", (long long)k, (long long)(pc + 1 + k));
        if (u[1] != n)
            return rt_vfail(vc, "member %lld has %lld elements, the block %lld", (long long)k,
                            (long long)u[1], (long long)n);
        if (local && u[2] != slot)
            return rt_vfail(vc, "tile-local member %lld writes @%lld, not its scratch slot @%lld",
                            (long long)k, (long long)u[2], (long long)slot);
        if (!local && rt_block_overlaps(u[2], n, bk.s0, bk.s1 - bk.s0))
            return rt_vfail(vc, "member %lld's output overlaps the scratch", (long long)k);
        sh = rt_block_shift[op];
        fl = (uint32_t)u[0] >> RT_FLAGS_SHIFT;
        for (j = 1; j < 4; j++) {
            const int64_t off = u[2 + j];
            const int arr = (sh >> j) & 1;
            int from_member = 0;
            if (!((rt_block_used[op] >> j) & 1))
                continue;
            if (!arr && (fl >> (j - 1)) & 1)
                return rt_vfail(vc, "member %lld: one-element operand %c needs an adjoint "
                                "(its sum over the tiles would round differently)",
                                (long long)k, (int)("abc"[j - 1]));
            for (i = 0; i < k; i++)
                if (arr && off == bk.mem[i * RT_WORDS + 2]) {
                    from_member = 1;
                    break;
                }
            if (from_member)
                continue;
            if (rt_block_overlaps(bk.s0, bk.s1 - bk.s0, off, arr ? n : 1))
                return rt_vfail(vc, "member %lld: operand %c reads the scratch without being "
                                "an earlier member's slot", (long long)k, (int)("abc"[j - 1]));
            for (i = 0; i < bk.m; i++) {
                const int64_t out = bk.mem[i * RT_WORDS + 2];
                if (!((bk.mask >> i) & 1) && rt_block_overlaps(out, n, off, arr ? n : 1))
                    return rt_vfail(vc, "member %lld: operand %c overlaps member %lld's output "
                                    "without being an earlier member's whole output",
                                    (long long)k, (int)("abc"[j - 1]), (long long)i);
            }
        }
        for (i = 0; i < k; i++)
            if (!local && !((bk.mask >> i) & 1)
                && rt_block_overlaps(bk.mem[i * RT_WORDS + 2], n, u[2], n))
                return rt_vfail(vc, "members %lld and %lld write overlapping regions",
                                (long long)i, (long long)k);
        if (local)
            slot += T;
    }
    return 1;
}

RT_VERIFY_FN(ENDBLOCK)
{
    const int64_t pc = vc->pc, m = w[2];
    const int32_t *s;
    int64_t j;
    (void)len;
    if (m < 1 || m > RT_BLOCK_MAX || pc - m - 1 < 0)
        return rt_vfail(vc, "no BLOCK %lld instructions before it", (long long)(m + 1));
    s = w - (m + 1) * RT_WORDS;
    for (j = 1; j < RT_WORDS; j++)
        if (s[j] != w[j])
            break;
    if ((s[0] & RT_OPCODE_MASK) != RT_OP_BLOCK || j < RT_WORDS)
        return rt_vfail(vc, "instruction %lld is not the BLOCK with the same words",
                        (long long)(pc - m - 1));
    return 1;
}
