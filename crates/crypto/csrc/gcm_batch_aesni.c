/*
 * AES-GCM for short packets on CPUs with AES-NI and PCLMULQDQ but neither VAES nor
 * VPCLMULQDQ (AMD Zen 1 and 2, Intel Haswell to Cascade Lake): two packets at a time in
 * 128-bit registers.
 *
 * Why: there intel-ipsec-mb 1.3 runs its AVX2 (or AVX-512) AES-GCM without vector AES, one
 * packet per call. At 64 bytes (48 of text) that call is latency-bound: four AES blocks and
 * five GHASH multiplications of one packet. Here two packets share the work:
 *   - their ten counter blocks (each packet's J0 and four text counters) go through AES as
 *     ten independent chains, enough to keep two AES units with a four-cycle latency busy;
 *   - each packet's GHASH is one sum of products (AAD, text, lengths against precomputed
 *     powers of H, Karatsuba with the powers' folded halves precomputed too) and one
 *     reduction.
 * Each pass is compiled for the longest text of its pair (one to four blocks): no AES chain
 * runs for a block the pair does not have, and the loops over blocks unroll; a partial last block is read and
 * written by 16-byte accesses ending at the text's last byte (shuffled into place), never
 * through a copy on the stack, whose 16-byte load waits for the copy's narrower stores.
 * On a Zen 1 host (2026-12-04, a loop sealing bursts of 64 alone, the two versions
 * alternated eight times): 5-9 % less time a seal where the last block is partial (36, 52,
 * 60 bytes of text), level where it is whole (48 bytes, a 64-byte frame's text).
 * Sealing and opening are compiled apart (no branch on the direction in a pass), a seal
 * writes each block as it is made, and the loops over a packet's blocks are unrolled, so
 * that the blocks stay in registers (GCC had made the store loop a memcpy call from a copy
 * on the stack): the same host, 2026-12-04, 3-15 % less time a seal at 16-64 bytes of text
 * (12 % at 48), 1-6 % an open; the pipeline 1.04-1.05x at 64-byte frames both ways.
 * Texts of up to ESPGW_GCM_AESNI_TEXT_MAX (64) bytes only; longer ones are left pending
 * for the library, whose one-packet code is throughput-bound at those sizes (passes of up
 * to eight blocks were tried the same day: 96-128 bytes took 106-113 ns a seal, the
 * library 81-95). (Running
 * gcm_batch_avx2.c's 256-bit passes as pairs of 128-bit instructions instead was tried on
 * a Zen 1 host and was slower than the library: 10.8 against 13.6 Mops at 64 bytes with
 * insert/extract, 6.4 with generic shuffles, which spilled the pairs to the stack.)
 *
 * As in gcm_batch.c: GHASH after Gueron and Kounavis (byte-reflected blocks, the 256-bit
 * sum shifted left by one and reduced once, algorithm 5); opening computes the tag over
 * the ciphertext, compares it in constant time and decrypts only an authentic packet,
 * saying which in the op's status; constant time in the key and the data (AES-NI and
 * carry-less multiplication, no table indexed by a secret; branches and copy lengths
 * depend on lengths only); only the round keys are wiped after a call. Proven against
 * intel-ipsec-mb's one-packet API and aws-lc-rs by the unit tests in src/ipsec_mb.rs
 * (every kernel the CPU runs) and tests/gcm_batch.rs (the provider's kernel), and by every
 * AES-GCM known-answer and interop test, which run on this path on such a CPU.
 */
#define _GNU_SOURCE /* explicit_bzero */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "gcm_batch.h"

#define TARGET __attribute__((target("aes,pclmul,sse4.1,ssse3")))

/* Packets per pass, text blocks per packet, and blocks per packet through AES (J0 and the
 * text counters). */
#define LANES 2
#define BLOCKS (ESPGW_GCM_AESNI_TEXT_MAX / 16)
#define CHAINS (BLOCKS + 1)
/* A packet's GHASH blocks: its AAD, its text, its lengths. */
#define PMAX (BLOCKS + 2)
_Static_assert(BLOCKS <= 4, "the loops over a packet's blocks are unrolled four times");
_Static_assert(2 * PMAX * 16 <= ESPGW_GCM_BATCH_KEY_SIZE - 1, "batch key size");

/* The batch data: H^1 .. H^PMAX byte-reflected, then for each the XOR of its two halves
 * (Karatsuba's middle factor) in the low half of a block. */
#define POWER(hd, e) ((const __m128i *)(hd) + (e) - 1)
#define FOLD(hd, e) ((const __m128i *)(hd) + PMAX + (e) - 1)

TARGET static inline __m128i reflect(__m128i x)
{
    return _mm_shuffle_epi8(x, _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
}

/* (lo, mid, hi) -> the product in GF(2^128), byte-reflected (white paper, algorithm 5). */
TARGET static inline __m128i reduce(__m128i lo, __m128i mid, __m128i hi)
{
    __m128i t3 = _mm_xor_si128(lo, _mm_slli_si128(mid, 8));
    __m128i t6 = _mm_xor_si128(hi, _mm_srli_si128(mid, 8));
    __m128i t7 = _mm_srli_epi32(t3, 31);
    __m128i t8 = _mm_srli_epi32(t6, 31);
    t3 = _mm_slli_epi32(t3, 1);
    t6 = _mm_slli_epi32(t6, 1);
    __m128i t9 = _mm_srli_si128(t7, 12);
    t8 = _mm_slli_si128(t8, 4);
    t7 = _mm_slli_si128(t7, 4);
    t3 = _mm_or_si128(t3, t7);
    t6 = _mm_or_si128(_mm_or_si128(t6, t8), t9);
    t7 = _mm_xor_si128(_mm_xor_si128(_mm_slli_epi32(t3, 31), _mm_slli_epi32(t3, 30)),
                       _mm_slli_epi32(t3, 25));
    t8 = _mm_srli_si128(t7, 4);
    t7 = _mm_slli_si128(t7, 12);
    t3 = _mm_xor_si128(t3, t7);
    __m128i t2 = _mm_xor_si128(_mm_xor_si128(_mm_srli_epi32(t3, 1), _mm_srli_epi32(t3, 2)),
                               _mm_srli_epi32(t3, 7));
    t2 = _mm_xor_si128(t2, t8);
    t3 = _mm_xor_si128(t3, t2);
    return _mm_xor_si128(t6, t3);
}

/* a * b in GF(2^128), byte-reflected (for the powers of H, once per key). */
TARGET static __m128i gfmul(__m128i a, __m128i b)
{
    __m128i mid = _mm_xor_si128(_mm_clmulepi64_si128(a, b, 0x01), _mm_clmulepi64_si128(a, b, 0x10));
    return reduce(_mm_clmulepi64_si128(a, b, 0x00), mid, _mm_clmulepi64_si128(a, b, 0x11));
}

/* The low half of a block XORed with its high half, in the low half. */
TARGET static inline __m128i fold(__m128i x)
{
    return _mm_xor_si128(x, _mm_srli_si128(x, 8));
}

struct round_keys {
    __m128i k[15];
    int rounds;
};

TARGET static inline void load_round_keys(const struct gcm_key_data *kd, uint32_t key_bytes,
                                          struct round_keys *rk)
{
    rk->rounds = key_bytes == 16 ? 10 : key_bytes == 24 ? 12 : 14;
    for (int r = 0; r <= rk->rounds; r++)
        rk->k[r] = _mm_loadu_si128((const __m128i *)(kd->expanded_keys + 16 * r));
}

TARGET void espgw_gcm_batch_key_aesni(const struct gcm_key_data *kd, uint32_t key_bytes,
                                      uint8_t *out)
{
    struct round_keys rk;
    load_round_keys(kd, key_bytes, &rk);
    __m128i b = _mm_xor_si128(_mm_setzero_si128(), rk.k[0]);
    for (int r = 1; r < rk.rounds; r++)
        b = _mm_aesenc_si128(b, rk.k[r]);
    b = _mm_aesenclast_si128(b, rk.k[rk.rounds]);
    __m128i h = reflect(b);
    __m128i p = h;
    for (int e = 1; e <= PMAX; e++) {
        _mm_storeu_si128((__m128i *)out + e - 1, p);
        _mm_storeu_si128((__m128i *)out + PMAX + e - 1, fold(p));
        p = gfmul(p, h);
    }
    explicit_bzero(&rk, sizeof(rk));
    explicit_bzero(&h, sizeof(h));
    explicit_bzero(&p, sizeof(p));
    explicit_bzero(&b, sizeof(b));
}

/* `n` (0-16) bytes from `src`, zero above; reads only those bytes. */
TARGET static inline __m128i load_partial(const uint8_t *src, uint32_t n)
{
    if (n >= 16)
        return _mm_loadu_si128((const __m128i *)src);
    uint8_t buf[16] = {0};
    memcpy(buf, src, n);
    return _mm_loadu_si128((const __m128i *)buf);
}

/* The first `n` (0-16) bytes of `v` to `dst`; writes only those bytes. */
TARGET static inline void store_partial(uint8_t *dst, uint32_t n, __m128i v)
{
    if (n >= 16) {
        _mm_storeu_si128((__m128i *)dst, v);
        return;
    }
    uint8_t buf[16];
    _mm_storeu_si128((__m128i *)buf, v);
    memcpy(dst, buf, n);
}

/* Ones in the first `n` (0-16) bytes. */
TARGET static inline __m128i first_bytes(uint32_t n)
{
    static const uint8_t ones_then_zeros[32] = {
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    };
    return _mm_loadu_si128((const __m128i *)(ones_then_zeros + 16 - (n > 16 ? 16 : n)));
}

/* PSHUFB controls: at offset d (0-16), byte j takes byte j + d, zero past the 16th
 * (a shift down by d bytes); and at offset d, byte j takes byte j + d - 16, zero below
 * (a shift up by 16 - d bytes). */
static const uint8_t shift_down[32] = {
    0,    1,    2,    3,    4,    5,    6,    7,    8,    9,    10,   11,   12,   13,   14,   15,
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
};
static const uint8_t shift_up[32] = {
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0,    1,    2,    3,    4,    5,    6,    7,    8,    9,    10,   11,   12,   13,   14,   15,
};

TARGET static inline __m128i shuffle_at(__m128i v, const uint8_t *table, uint32_t d)
{
    return _mm_shuffle_epi8(v, _mm_loadu_si128((const __m128i *)(table + d)));
}

/* Block `b` of a text of `len` bytes, zero past its end. A partial last block of a text
 * of at least 16 bytes is one load ending at the text's last byte, shifted down: a copy
 * to the stack and a 16-byte load of it (load_partial) waits for the copy's narrower
 * stores to retire (the load cannot take its bytes from them). */
TARGET static inline __m128i load_block(const uint8_t *text, uint32_t len, uint32_t b)
{
    uint32_t left = len - 16 * b;
    if (left >= 16)
        return _mm_loadu_si128((const __m128i *)(text + 16 * b));
    if (len >= 16)
        return shuffle_at(_mm_loadu_si128((const __m128i *)(text + len - 16)), shift_down, 16 - left);
    return load_partial(text + 16 * b, left);
}

/* Block `b` of the `k` blocks of `x` written to a text of `len` bytes
 * (16 (k - 1) < len <= 16 k), nothing past its end: whole, or, as the last one and
 * partial, with the end of the block before it as one store ending at the text's last
 * byte. Sealing writes each block in the loop that makes it; opening, all of them once
 * the tag matched (store_text). */
TARGET static inline __attribute__((always_inline)) void
store_block(uint8_t *text, uint32_t len, uint32_t k, uint32_t b, const __m128i *x)
{
    uint32_t last = len - 16 * (k - 1);
    if (b + 1 < k || last == 16)
        _mm_storeu_si128((__m128i *)(text + 16 * b), x[b]);
    else if (b >= 1)
        _mm_storeu_si128((__m128i *)(text + len - 16),
                         _mm_or_si128(shuffle_at(x[b - 1], shift_down, last),
                                      shuffle_at(x[b], shift_up, last)));
    else
        store_partial(text, last, x[0]);
}

/* The `k` (1 to K) blocks of `x` written as a text of `len` bytes. The loops over a
 * packet's blocks are unrolled up to the constant K (at most 4, asserted above), so that
 * every index into `x` is a constant and the blocks stay in registers: left to GCC, the
 * loop over the whole blocks up to `k` became a call to memcpy from a copy of `x` on the
 * stack, and the GHASH loop of a four-block pass indexed `x` on the stack too. */
TARGET static inline __attribute__((always_inline)) void
store_text(uint8_t *text, uint32_t len, uint32_t k, const __m128i *x, const uint32_t K)
{
#pragma GCC unroll 4
    for (uint32_t b = 0; b < K && b < k; b++)
        store_block(text, len, k, b, x);
}

/* Up to LANES ops whose texts have at most K blocks (K a constant at each call: only the
 * chains the texts need, and loops the compiler unrolls): their counter blocks through AES
 * together, each packet's GHASH, its tag; sealing writes text and tag, opening compares
 * the tag first and writes the text only if it matches. */
TARGET static inline __attribute__((always_inline)) void
run_lanes_k(const struct round_keys *rk, const uint8_t *hd, const int encrypt,
            struct espgw_aead_op *const *o, uint32_t n, const uint32_t K)
{
    __m128i s[LANES][CHAINS];
    for (uint32_t i = 0; i < LANES; i++) {
        /* J0 = nonce || 1 (RFC 4106: 12-byte nonces); text counters 2 .. K + 1, the
         * counter's big-endian low byte never carrying. op->iv is followed by the op's
         * other fields, so a 16-byte load stays inside it. */
        __m128i j = i < n ? _mm_loadu_si128((const __m128i *)o[i]->iv) : _mm_setzero_si128();
        j = _mm_insert_epi32(j, 1 << 24, 3);
        for (uint32_t b = 0; b <= K; b++)
            s[i][b] = _mm_xor_si128(_mm_add_epi32(j, _mm_set_epi32((int)(b << 24), 0, 0, 0)), rk->k[0]);
    }
    for (int r = 1; r < rk->rounds; r++)
        for (uint32_t i = 0; i < LANES; i++)
            for (uint32_t b = 0; b <= K; b++)
                s[i][b] = _mm_aesenc_si128(s[i][b], rk->k[r]);
    for (uint32_t i = 0; i < LANES; i++)
        for (uint32_t b = 0; b <= K; b++)
            s[i][b] = _mm_aesenclast_si128(s[i][b], rk->k[rk->rounds]);

    for (uint32_t i = 0; i < n; i++) {
        struct espgw_aead_op *op = o[i];
        uint32_t len = (uint32_t)op->len;
        uint32_t k = (len + 15) / 16;
        uint32_t m = k + 2;
        __m128i x[BLOCKS] = {0}; /* each of the first k written below (k <= K) */
        /* GHASH: X_1 = AAD, X_2 .. X_(k+1) the ciphertext, X_(k+2) the lengths; X_j times
         * H^(m + 1 - j), summed, reduced once. */
        __m128i aad = _mm_and_si128(_mm_loadu_si128((const __m128i *)op->aad), first_bytes(op->aad_len));
        __m128i a = reflect(aad);
        __m128i lo = _mm_clmulepi64_si128(a, *POWER(hd, m), 0x00);
        __m128i hi = _mm_clmulepi64_si128(a, *POWER(hd, m), 0x11);
        __m128i mid = _mm_clmulepi64_si128(fold(a), *FOLD(hd, m), 0x00);
#pragma GCC unroll 4
        for (uint32_t b = 0; b < K && b < k; b++) {
            __m128i t = load_block(op->text, len, b);
            x[b] = _mm_xor_si128(t, s[i][b + 1]);
            if (len - 16 * b < 16)
                x[b] = _mm_and_si128(x[b], first_bytes(len - 16 * b));
            __m128i c = reflect(encrypt ? x[b] : t);
            uint32_t e = m - 1 - b;
            lo = _mm_xor_si128(lo, _mm_clmulepi64_si128(c, *POWER(hd, e), 0x00));
            hi = _mm_xor_si128(hi, _mm_clmulepi64_si128(c, *POWER(hd, e), 0x11));
            mid = _mm_xor_si128(mid, _mm_clmulepi64_si128(fold(c), *FOLD(hd, e), 0x00));
            if (encrypt)
                store_block(op->text, len, k, b, x);
        }
        /* The lengths block in bits (already in reflected order: the AAD's in the high
         * half), times H^1. */
        __m128i l = _mm_set_epi64x((long long)op->aad_len * 8, (long long)len * 8);
        lo = _mm_xor_si128(lo, _mm_clmulepi64_si128(l, *POWER(hd, 1), 0x00));
        hi = _mm_xor_si128(hi, _mm_clmulepi64_si128(l, *POWER(hd, 1), 0x11));
        mid = _mm_xor_si128(mid, _mm_clmulepi64_si128(fold(l), *FOLD(hd, 1), 0x00));
        /* Karatsuba: the middle term is (a0 ^ a1)(b0 ^ b1) ^ a0 b0 ^ a1 b1. */
        mid = _mm_xor_si128(mid, _mm_xor_si128(lo, hi));
        __m128i tag = _mm_xor_si128(reflect(reduce(lo, mid, hi)), s[i][0]);
        int write;
        if (encrypt) {
            store_partial(op->tag, op->tag_len, tag);
            op->status = ESPGW_OP_DONE;
            write = 1;
        } else {
            __m128i theirs = load_partial(op->text + len, op->tag_len);
            __m128i diff = _mm_and_si128(_mm_xor_si128(tag, theirs), first_bytes(op->tag_len));
            write = _mm_testz_si128(diff, diff);
            op->status = write ? ESPGW_OP_AUTHENTIC : ESPGW_OP_FORGED;
        }
        if (!encrypt && write && k > 0)
            store_text(op->text, len, k, x, K);
    }
}

/* run_lanes_k for the longest text of the ops (0 to BLOCKS blocks). */
TARGET static inline __attribute__((always_inline)) void
run_lanes(const struct round_keys *rk, const uint8_t *hd, const int encrypt,
          struct espgw_aead_op *const *o, uint32_t n)
{
    uint64_t longest = 0;
    for (uint32_t i = 0; i < n; i++)
        longest = o[i]->len > longest ? o[i]->len : longest;
    switch ((longest + 15) / 16) {
    case 0:
    case 1:
        run_lanes_k(rk, hd, encrypt, o, n, 1);
        break;
    case 2:
        run_lanes_k(rk, hd, encrypt, o, n, 2);
        break;
    case 3:
        run_lanes_k(rk, hd, encrypt, o, n, 3);
        break;
    default:
        run_lanes_k(rk, hd, encrypt, o, n, BLOCKS);
        break;
    }
}

/* Sealing and opening compiled apart: each pass's code has no branch on the direction,
 * and a change to one does not move the other's code. */
TARGET static void seal_lanes(const struct round_keys *rk, const uint8_t *hd,
                              struct espgw_aead_op *const *o, uint32_t n)
{
    run_lanes(rk, hd, 1, o, n);
}

TARGET static void open_lanes(const struct round_keys *rk, const uint8_t *hd,
                              struct espgw_aead_op *const *o, uint32_t n)
{
    run_lanes(rk, hd, 0, o, n);
}

TARGET uint32_t espgw_gcm_batch_aesni(const uint8_t *hd, const struct gcm_key_data *kd,
                                      uint32_t key_bytes, int encrypt, struct espgw_aead_op *ops,
                                      uint32_t n)
{
    struct round_keys rk;
    load_round_keys(kd, key_bytes, &rk);
    struct espgw_aead_op *lane[LANES];
    uint32_t done = 0, nl = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!espgw_gcm_batch_eligible(&ops[i]) || ops[i].len > ESPGW_GCM_AESNI_TEXT_MAX)
            continue;
        lane[nl++] = &ops[i];
        if (nl == LANES) {
            (encrypt ? seal_lanes : open_lanes)(&rk, hd, lane, LANES);
            done += LANES;
            nl = 0;
        }
    }
    if (nl > 0) {
        (encrypt ? seal_lanes : open_lanes)(&rk, hd, lane, nl);
        done += nl;
    }
    explicit_bzero(&rk, sizeof(rk));
    return done;
}
