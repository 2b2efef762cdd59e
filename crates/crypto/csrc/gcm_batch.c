/*
 * AES-GCM for short packets, four at a time (espgw's own multi-buffer kernel).
 *
 * Why: intel-ipsec-mb 1.3 runs AES-GCM one packet per call. For a 64-byte frame (52 bytes
 * of text) that call is latency-bound: five AES blocks and six GHASH multiplications in
 * one dependent chain, 29 % of the 64-byte outbound profile on this project's test
 * machine. Here four packets share the work:
 *   - their counter blocks go through AES as independent 512-bit chains (each packet's
 *     text counters, four to a chain, and the four J0s together), so the AES unit is kept
 *     busy instead of waiting on one packet's rounds;
 *   - each packet's GHASH is one sum of products: its blocks (AAD, text, lengths) in
 *     groups of four lanes against precomputed powers of H with 512-bit VPCLMULQDQ, and
 *     the four packets' reductions are done together, one per 128-bit lane.
 * Texts of up to 64 bytes (four blocks: one text chain, two GHASH groups) and of 65-128
 * bytes (eight: two chains, three groups) are grouped apart, so a short packet never pays
 * for a long one's second chain. The second size class takes the IPsec IMIX's 90- and
 * 92-byte frames (76 bytes of text), which the library ran at half the rate of 80-byte
 * ones (`bench dataplane`, AES-128-GCM outbound, one core: 15.2 Mpps at 90 B against 19.5
 * at 80 B before, 17.9 at 90 B with it; IMIX 11.8 -> 12.8 Mpps).
 * Packets with more than ESPGW_GCM_BATCH_TEXT_MAX (128) bytes of text go to the library,
 * whose one-packet code is throughput-bound at those sizes. (A version that took texts of
 * up to 240 bytes in one group, counter blocks staged in memory, was slower than the
 * library at 64 bytes: `bench dataplane`, 14.9 against 16.8 Mpps outbound.)
 *
 * Opening authenticates first: the tag is computed over the ciphertext and compared with
 * the packet's (constant time), and the text is decrypted only when they match. The op's
 * status says which (ESPGW_OP_AUTHENTIC or ESPGW_OP_FORGED), so the caller does not
 * compare again: with the comparison in Rust as well, the binding's open path was 8.7 % of
 * the 64-byte inbound profile against 5.6 % for sealing.
 *
 * GHASH follows Intel's carry-less multiplication white paper (Gueron and Kounavis,
 * "Intel Carry-Less Multiplication Instruction and its Usage for Computing the GCM Mode",
 * rev. 2.02, algorithms 1 and 5): blocks byte-reflected, 256-bit products summed, the sum
 * shifted left by one bit and reduced modulo x^128 + x^7 + x^2 + x + 1 once. Proven against
 * intel-ipsec-mb's one-packet API and aws-lc-rs on random keys, nonces, AADs and lengths
 * (tests/gcm_batch.rs), and by every AES-GCM known-answer and interop test, which run on
 * this path by default.
 *
 * Everything here is constant time in the key and the data: AES-NI, carry-less
 * multiplication, masked loads and stores chosen by lengths only, no table lookups.
 */
#define _GNU_SOURCE /* explicit_bzero */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "gcm_batch.h"

#define TARGET \
    __attribute__((target("avx512f,avx512bw,avx512vl,vaes,vpclmulqdq,aes,pclmul,avx2,sse4.1")))

/* Text blocks per packet on this path, and the highest power of H a packet needs (its
 * AAD block, its text blocks, its lengths block). */
#define TEXT_BLOCKS_MAX (ESPGW_GCM_BATCH_TEXT_MAX / 16)
/* The longest text of the four-block groups; longer ones (up to ESPGW_GCM_BATCH_TEXT_MAX)
 * go in groups with a second AES chain and a third GHASH group per packet. */
#define SHORT_TEXT_MAX ESPGW_GCM_BATCH_SHORT_TEXT_MAX
#define PMAX (TEXT_BLOCKS_MAX + 2)
/* Powers stored descending: hdesc[i] = H^(PMAX - i), byte-reflected, then six zero
 * blocks that a packet's last group of four blocks may read past its end (its blocks
 * there are zero, so what they are multiplied by does not matter): a group starts at
 * hdesc[PMAX - m], and the farthest read is a four-block packet's eighth lane with m = 2,
 * hdesc[PMAX + 5] (an eight-block packet's twelfth, m >= 7, reads at most PMAX + 4). */
#define HDESC_LEN (PMAX + 6)
_Static_assert(HDESC_LEN * 16 <= ESPGW_GCM_BATCH_KEY_SIZE - 1, "batch key size");

TARGET static inline __m128i bswap128(__m128i x)
{
    return _mm_shuffle_epi8(x, _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
}

/* (lo, mid, hi) -> the products in GF(2^128), byte-reflected, in each 128-bit lane: the
 * middle folded in, the 256-bit value shifted left by one (the reflection) and reduced
 * (white paper, algorithm 5); four packets' products at once. */
TARGET static inline __m512i reduce4(__m512i lo, __m512i mid, __m512i hi)
{
    __m512i t3 = _mm512_xor_si512(lo, _mm512_bslli_epi128(mid, 8));
    __m512i t6 = _mm512_xor_si512(hi, _mm512_bsrli_epi128(mid, 8));
    __m512i t7 = _mm512_srli_epi32(t3, 31);
    __m512i t8 = _mm512_srli_epi32(t6, 31);
    t3 = _mm512_slli_epi32(t3, 1);
    t6 = _mm512_slli_epi32(t6, 1);
    __m512i t9 = _mm512_bsrli_epi128(t7, 12);
    t8 = _mm512_bslli_epi128(t8, 4);
    t7 = _mm512_bslli_epi128(t7, 4);
    t3 = _mm512_or_si512(t3, t7);
    t6 = _mm512_or_si512(_mm512_or_si512(t6, t8), t9);
    t7 = _mm512_xor_si512(_mm512_xor_si512(_mm512_slli_epi32(t3, 31), _mm512_slli_epi32(t3, 30)),
                          _mm512_slli_epi32(t3, 25));
    t8 = _mm512_bsrli_epi128(t7, 4);
    t7 = _mm512_bslli_epi128(t7, 12);
    t3 = _mm512_xor_si512(t3, t7);
    __m512i t2 = _mm512_xor_si512(
        _mm512_xor_si512(_mm512_srli_epi32(t3, 1), _mm512_srli_epi32(t3, 2)),
        _mm512_srli_epi32(t3, 7));
    t2 = _mm512_xor_si512(t2, t8);
    t3 = _mm512_xor_si512(t3, t2);
    return _mm512_xor_si512(t6, t3);
}

/* a * b in GF(2^128), byte-reflected (for the powers of H, once per key). */
TARGET static __m128i gfmul(__m128i a, __m128i b)
{
    __m512i x = _mm512_broadcast_i32x4(a), y = _mm512_broadcast_i32x4(b);
    __m512i mid = _mm512_xor_si512(_mm512_clmulepi64_epi128(x, y, 0x01),
                                   _mm512_clmulepi64_epi128(x, y, 0x10));
    return _mm512_castsi512_si128(reduce4(_mm512_clmulepi64_epi128(x, y, 0x00), mid,
                                          _mm512_clmulepi64_epi128(x, y, 0x11)));
}

/* The AES round keys as the library expanded them, each broadcast to four lanes. */
struct round_keys {
    __m512i k[15];
    int rounds;
};

TARGET static inline void load_round_keys(const struct gcm_key_data *kd, uint32_t key_bytes,
                                          struct round_keys *rk)
{
    rk->rounds = key_bytes == 16 ? 10 : key_bytes == 24 ? 12 : 14;
    for (int r = 0; r <= rk->rounds; r++)
        rk->k[r] = _mm512_broadcast_i32x4(
            _mm_loadu_si128((const __m128i *)(kd->expanded_keys + 16 * r)));
}

TARGET static __m128i aes_block(const struct round_keys *rk, __m128i b)
{
    b = _mm_xor_si128(b, _mm512_castsi512_si128(rk->k[0]));
    for (int r = 1; r < rk->rounds; r++)
        b = _mm_aesenc_si128(b, _mm512_castsi512_si128(rk->k[r]));
    return _mm_aesenclast_si128(b, _mm512_castsi512_si128(rk->k[rk->rounds]));
}

/* Whether this CPU can run `kernel` (one of ESPGW_GCM_BATCH_*). */
int espgw_gcm_batch_runs(int kernel)
{
    __builtin_cpu_init();
    int aes_ni = __builtin_cpu_supports("aes") && __builtin_cpu_supports("pclmul");
    int vector_aes = aes_ni && __builtin_cpu_supports("vaes") &&
                     __builtin_cpu_supports("vpclmulqdq");
    int avx2 = __builtin_cpu_supports("avx2");
    switch (kernel) {
    case ESPGW_GCM_BATCH_AVX512:
        return vector_aes && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    case ESPGW_GCM_BATCH_AVX2: return vector_aes && avx2;
    case ESPGW_GCM_BATCH_AESNI: return aes_ni && avx2;
    default: return 0;
    }
}

int espgw_gcm_batch_supported(void)
{
    /* The widest the CPU runs. */
    if (espgw_gcm_batch_runs(ESPGW_GCM_BATCH_AVX512))
        return ESPGW_GCM_BATCH_AVX512;
    if (espgw_gcm_batch_runs(ESPGW_GCM_BATCH_AVX2))
        return ESPGW_GCM_BATCH_AVX2;
    if (espgw_gcm_batch_runs(ESPGW_GCM_BATCH_AESNI))
        return ESPGW_GCM_BATCH_AESNI;
    return 0;
}

TARGET static void batch_key(const struct gcm_key_data *kd, uint32_t key_bytes, uint8_t *out)
{
    struct round_keys rk;
    load_round_keys(kd, key_bytes, &rk);
    /* H = E(K, 0^128), byte-reflected; then H^2 .. H^PMAX. */
    __m128i h = bswap128(aes_block(&rk, _mm_setzero_si128()));
    __m128i p = h;
    for (int e = 1; e <= PMAX; e++) {
        _mm_storeu_si128((__m128i *)(out + 16 * (PMAX - e)), p);
        p = gfmul(p, h);
    }
    explicit_bzero(&rk, sizeof(rk));
}

int espgw_gcm_batch_key_for(const struct gcm_key_data *kd, uint32_t key_bytes, uint8_t *out,
                            int kernel)
{
    if (!espgw_gcm_batch_runs(kernel) || !(key_bytes == 16 || key_bytes == 24 || key_bytes == 32))
        return 0;
    memset(out, 0, ESPGW_GCM_BATCH_KEY_SIZE);
    if (kernel == ESPGW_GCM_BATCH_AVX512)
        batch_key(kd, key_bytes, out);
    else if (kernel == ESPGW_GCM_BATCH_AVX2)
        espgw_gcm_batch_key_avx2(kd, key_bytes, out);
    else
        espgw_gcm_batch_key_aesni(kd, key_bytes, out);
    /* The kernel the data is for, read back by espgw_gcm_batch: no global state. */
    out[ESPGW_GCM_BATCH_KEY_SIZE - 1] = (uint8_t)kernel;
    return 1;
}

int espgw_gcm_batch_key(const struct gcm_key_data *kd, uint32_t key_bytes, uint8_t *out)
{
    return espgw_gcm_batch_key_for(kd, key_bytes, out, espgw_gcm_batch_supported());
}

static inline __mmask64 first_bytes(uint64_t n)
{
    return n >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << n) - 1);
}

/* Whether the first `n` bytes of a and b are equal, in time that depends on n alone. */
TARGET static inline int tag_equal(__m128i a, const uint8_t *b, uint32_t n)
{
    __mmask16 mk = (__mmask16)((1u << n) - 1);
    __m128i x = _mm_xor_si128(a, _mm_maskz_loadu_epi8(mk, b));
    return _mm_test_all_zeros(_mm_maskz_mov_epi8(mk, x), _mm_set1_epi8(-1));
}

/* Lane p of the result: the four lanes of v[p] summed (XOR). */
TARGET static inline __m512i sum_lanes4(const __m512i *v)
{
    __m512i ab = _mm512_xor_si512(_mm512_shuffle_i64x2(v[0], v[1], 0x44),
                                  _mm512_shuffle_i64x2(v[0], v[1], 0xee));
    __m512i cd = _mm512_xor_si512(_mm512_shuffle_i64x2(v[2], v[3], 0x44),
                                  _mm512_shuffle_i64x2(v[2], v[3], 0xee));
    return _mm512_xor_si512(_mm512_shuffle_i64x2(ab, cd, 0x88), _mm512_shuffle_i64x2(ab, cd, 0xdd));
}

/* GHASH's products for one packet from its text, `c0` its first four blocks and `c1` the
 * next four (ciphertext, zero past the text's end): the blocks are X = (AAD, C1 .. Ck,
 * lengths), m = k + 2 of them, X_j times H^(m - j), in `groups` groups of four lanes,
 * [AAD C1 C2 C3] [C4 C5 C6 C7] [C8 ..], each with four 512-bit carry-less
 * multiplications. Two groups hold a text of up to four blocks (m <= 6), three one of up
 * to eight (m <= 10). Returns the (lo, mid, hi) partial sums, four lanes each,
 * unreduced. */
TARGET static inline void products(const uint8_t *hdesc, const struct espgw_aead_op *op,
                                   __m512i c0, __m512i c1, int groups, __m512i *lo,
                                   __m512i *mid, __m512i *hi)
{
    const __m512i reflect = _mm512_broadcast_i32x4(
        _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    uint32_t len = (uint32_t)op->len;
    uint32_t k = (len + 15) / 16;
    uint32_t m = k + 2;
    __m128i aad = _mm_maskz_loadu_epi8((__mmask16)((1u << op->aad_len) - 1), op->aad);
    __m512i x[3];
    x[0] = _mm512_alignr_epi64(c0, _mm512_inserti32x4(_mm512_setzero_si512(), aad, 3), 6);
    x[1] = _mm512_alignr_epi64(c1, c0, 6);
    x[2] = _mm512_alignr_epi64(_mm512_setzero_si512(), c1, 6);
    /* The lengths block (bit lengths; the AAD's in the high half once reflected) at X_(k+1). */
    __m512i n = _mm512_broadcast_i32x4(
        _mm_set_epi64x((long long)op->aad_len * 8, (long long)len * 8));
    uint32_t pos = k + 1;
    const uint8_t *h = hdesc + 16 * (PMAX - m);
    *lo = *mid = *hi = _mm512_setzero_si512();
    for (int g = 0; g < groups; g++) {
        uint32_t lane = pos - 4 * (uint32_t)g; /* wraps past 3 where pos is in another group */
        __m512i xg = _mm512_xor_si512(
            _mm512_shuffle_epi8(x[g], reflect),
            _mm512_maskz_mov_epi64(lane < 4 ? (__mmask8)(3u << (2 * lane)) : 0, n));
        __m512i hg = _mm512_loadu_si512((const void *)(h + 64 * g));
        *lo = _mm512_xor_si512(*lo, _mm512_clmulepi64_epi128(xg, hg, 0x00));
        *hi = _mm512_xor_si512(*hi, _mm512_clmulepi64_epi128(xg, hg, 0x11));
        *mid = _mm512_xor_si512(*mid, _mm512_xor_si512(_mm512_clmulepi64_epi128(xg, hg, 0x01),
                                                       _mm512_clmulepi64_epi128(xg, hg, 0x10)));
    }
}

/* Up to four ops (`o[0..n]`), each with at most four blocks of text, or with `wide` five
 * to eight: their counter blocks encrypted together (each packet's text counters as one
 * 512-bit AES chain per four blocks, and the four J0s in one more), each packet's GHASH
 * products, then the four reductions in one and the tags. Sealing writes each tag to
 * op->tag. Opening computes the tag over the ciphertext first and decrypts only if the
 * packet's own tag (right after its text) equals it, and says so in the op's status.
 * Inlined into two copies, `wide` a constant in each. */
TARGET static inline void run_four(const struct round_keys *rk, const uint8_t *hdesc,
                                   int encrypt, struct espgw_aead_op *const *o, uint32_t n,
                                   int wide)
{
    /* J0 = nonce || 1; the text's counters 2 .. 9 (RFC 4106 nonces are 12 bytes; the
     * counter's low byte never carries with eight blocks). The counter is big-endian, its
     * last byte the top byte of the fourth 32-bit word. Chains: s[i] packet i's blocks
     * 1-4, s[4] the four J0s, s[5 + i] packet i's blocks 5-8. */
    const __m512i steps = _mm512_set_epi32(4 << 24, 0, 0, 0, 3 << 24, 0, 0, 0,
                                           2 << 24, 0, 0, 0, 1 << 24, 0, 0, 0);
    const __m512i steps_wide = _mm512_add_epi32(steps, _mm512_set_epi32(4 << 24, 0, 0, 0,
                                                                         4 << 24, 0, 0, 0,
                                                                         4 << 24, 0, 0, 0,
                                                                         4 << 24, 0, 0, 0));
    const __m128i one = _mm_set_epi32(1 << 24, 0, 0, 0);
    const uint32_t chains = wide ? 9 : 5;
    __m128i j[4];
    __m512i s[9], x[4], x2[4], lo[4], mid[4], hi[4];
    __mmask64 mk[4], mk2[4];
    for (uint32_t i = 0; i < 4; i++) {
        j[i] = i < n ? _mm_or_si128(_mm_maskz_loadu_epi8(0x0fff, o[i]->iv), one) : one;
        s[i] = _mm512_add_epi32(_mm512_broadcast_i32x4(j[i]), steps);
        if (wide)
            s[5 + i] = _mm512_add_epi32(_mm512_broadcast_i32x4(j[i]), steps_wide);
    }
    s[4] = _mm512_inserti32x4(
        _mm512_inserti32x4(_mm512_inserti32x4(_mm512_castsi128_si512(j[0]), j[1], 1), j[2], 2),
        j[3], 3);
    for (uint32_t z = 0; z < chains; z++)
        s[z] = _mm512_xor_si512(s[z], rk->k[0]);
    for (int r = 1; r < rk->rounds; r++)
        for (uint32_t z = 0; z < chains; z++)
            s[z] = _mm512_aesenc_epi128(s[z], rk->k[r]);
    for (uint32_t z = 0; z < chains; z++)
        s[z] = _mm512_aesenclast_epi128(s[z], rk->k[rk->rounds]);
    for (uint32_t i = 0; i < 4; i++) {
        if (i >= n) {
            lo[i] = mid[i] = hi[i] = x[i] = x2[i] = _mm512_setzero_si512();
            mk[i] = mk2[i] = 0;
            continue;
        }
        mk[i] = first_bytes(o[i]->len);
        mk2[i] = wide ? first_bytes(o[i]->len - 64) : 0;
        __m512i t = _mm512_maskz_loadu_epi8(mk[i], o[i]->text);
        /* Only a wide text reaches past its 64th byte (forming text + 64 for a shorter one
         * would point past its buffer). */
        __m512i t2 = wide ? _mm512_maskz_loadu_epi8(mk2[i], o[i]->text + 64)
                          : _mm512_setzero_si512();
        x[i] = _mm512_maskz_mov_epi8(mk[i], _mm512_xor_si512(t, s[i]));
        x2[i] = wide ? _mm512_maskz_mov_epi8(mk2[i], _mm512_xor_si512(t2, s[5 + i]))
                     : _mm512_setzero_si512();
        products(hdesc, o[i], encrypt ? x[i] : t, encrypt ? x2[i] : t2, wide ? 3 : 2, &lo[i],
                 &mid[i], &hi[i]);
    }
    const __m512i reflect = _mm512_broadcast_i32x4(
        _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    __m512i tags = _mm512_xor_si512(
        _mm512_shuffle_epi8(reduce4(sum_lanes4(lo), sum_lanes4(mid), sum_lanes4(hi)), reflect),
        s[4]);
    for (uint32_t i = 0; i < n; i++) {
        struct espgw_aead_op *op = o[i];
        __m128i tag = _mm512_castsi512_si128(
            _mm512_maskz_compress_epi64((__mmask8)(3u << (2 * i)), tags));
        int write;
        if (encrypt) {
            _mm_mask_storeu_epi8(op->tag, (__mmask16)((1u << op->tag_len) - 1), tag);
            op->status = ESPGW_OP_DONE;
            write = 1;
        } else if (tag_equal(tag, op->text + op->len, op->tag_len)) {
            op->status = ESPGW_OP_AUTHENTIC;
            write = 1;
        } else {
            op->status = ESPGW_OP_FORGED;
            write = 0;
        }
        if (write) {
            _mm512_mask_storeu_epi8(op->text, mk[i], x[i]);
            if (wide)
                _mm512_mask_storeu_epi8(op->text + 64, mk2[i], x2[i]);
        }
    }
}

TARGET static void run_four_short(const void *rk, const uint8_t *hdesc, int encrypt,
                                  struct espgw_aead_op *const *o, uint32_t n)
{
    run_four(rk, hdesc, encrypt, o, n, 0);
}

TARGET static void run_four_wide(const void *rk, const uint8_t *hdesc, int encrypt,
                                 struct espgw_aead_op *const *o, uint32_t n)
{
    run_four(rk, hdesc, encrypt, o, n, 1);
}

/* The eligible ops four at a time, packets of up to four blocks and of five to eight in
 * separate groups (espgw_gcm_batch_in_fours), so that a short packet never pays for a
 * long one's second AES chain. */
TARGET static uint32_t batch_avx512(const uint8_t *hdesc, const struct gcm_key_data *kd,
                                    uint32_t key_bytes, int encrypt, struct espgw_aead_op *ops,
                                    uint32_t n)
{
    struct round_keys rk;
    load_round_keys(kd, key_bytes, &rk);
    uint32_t done =
        espgw_gcm_batch_in_fours(&rk, hdesc, encrypt, ops, n, run_four_short, run_four_wide);
    explicit_bzero(&rk, sizeof(rk));
    return done;
}

/* Plain C (no target attribute): it only sorts the ops into groups and calls the kernel's
 * passes, one indirect call per four packets. */
uint32_t espgw_gcm_batch_in_fours(const void *rk, const uint8_t *hdesc, int encrypt,
                                  struct espgw_aead_op *ops, uint32_t n,
                                  espgw_gcm_four_fn run_short, espgw_gcm_four_fn run_wide)
{
    struct espgw_aead_op *short_four[4], *wide_four[4];
    uint32_t done = 0, ns = 0, nw = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!espgw_gcm_batch_eligible(&ops[i]))
            continue;
        if (ops[i].len <= ESPGW_GCM_BATCH_SHORT_TEXT_MAX) {
            short_four[ns++] = &ops[i];
            if (ns == 4) {
                run_short(rk, hdesc, encrypt, short_four, 4);
                done += 4;
                ns = 0;
            }
        } else {
            wide_four[nw++] = &ops[i];
            if (nw == 4) {
                run_wide(rk, hdesc, encrypt, wide_four, 4);
                done += 4;
                nw = 0;
            }
        }
    }
    if (ns > 0) {
        run_short(rk, hdesc, encrypt, short_four, ns);
        done += ns;
    }
    if (nw > 0) {
        run_wide(rk, hdesc, encrypt, wide_four, nw);
        done += nw;
    }
    return done;
}

/* Called only with batch data, which espgw_gcm_batch_key makes only where the CPU has
 * the instructions, and for the kernel named in its last byte. */
uint32_t espgw_gcm_batch(const uint8_t *hdesc, const struct gcm_key_data *kd, uint32_t key_bytes,
                         int encrypt, struct espgw_aead_op *ops, uint32_t n)
{
    switch (hdesc[ESPGW_GCM_BATCH_KEY_SIZE - 1]) {
    case ESPGW_GCM_BATCH_AVX512: return batch_avx512(hdesc, kd, key_bytes, encrypt, ops, n);
    case ESPGW_GCM_BATCH_AVX2: return espgw_gcm_batch_avx2(hdesc, kd, key_bytes, encrypt, ops, n);
    case ESPGW_GCM_BATCH_AESNI:
        return espgw_gcm_batch_aesni(hdesc, kd, key_bytes, encrypt, ops, n);
    default: return 0;
    }
}

/* The 256-bit kernel's AES-GMAC pass where the batch data is for it; see gcm_batch.h. */
uint32_t espgw_gmac_batch(const uint8_t *hdesc, const struct gcm_key_data *kd,
                          uint32_t key_bytes, struct espgw_aead_op *ops, uint32_t n)
{
    if (hdesc[ESPGW_GCM_BATCH_KEY_SIZE - 1] != ESPGW_GCM_BATCH_AVX2)
        return 0;
    return espgw_gmac_batch_avx2(hdesc, kd, key_bytes, ops, n);
}
