/*
 * The batch AES-GCM kernel of gcm_batch.c for CPUs with VAES and VPCLMULQDQ but no
 * AVX-512 (AMD Zen 3, Intel Alder Lake and later client cores): the same four packets at a
 * time in 256-bit registers.
 *
 * Why: on such a CPU intel-ipsec-mb 1.3 runs its AVX2 code, whose AES-GCM has neither VAES
 * nor VPCLMULQDQ and handles one packet per call; at 64 bytes (52 of text) that call is one
 * dependent chain of five AES blocks and six GHASH multiplications (42 ns a packet on the
 * 2026-12-01 host, a third of the 64-byte outbound profile). Here, as in gcm_batch.c:
 *   - four packets' counter blocks go through AES as independent 256-bit chains (two blocks
 *     to a chain: two chains a packet up to 64 bytes of text, three up to 96 where a group's
 *     texts all fit, four up to 128, and the four J0s in two more), so the AES units are
 *     kept busy instead of waiting on one packet;
 *   - each packet's GHASH is one sum of products, its blocks (AAD, text, lengths) two to a
 *     register against the precomputed powers of H (the same batch data as gcm_batch.c's),
 *     and the reductions of two packets are done together, one per 128-bit lane.
 * AVX2 has no byte-masked loads and stores: a packet's text and tag are read with
 * dword-masked loads (load_upto32) and written with whole stores and overlapping pieces
 * (store_upto32), so that only the bytes of the text and the tag are ever read or written
 * in the packet. As
 * in gcm_batch.c, only the round keys are wiped after a call: the keystream and the texts
 * left on the stack are no key (the text is in the packet anyway).
 *
 * AES-GMAC (RFC 4543, ESP's and AH's ICV without encryption) runs through the same pass:
 * GCM with the covered bytes as the AAD and no text, i.e. the packet's blocks GHASHed as
 * they are and the tag masked with E(K, J0); espgw_gmac_batch below.
 *
 * Texts longer than the four-packet groups take (and AES-GMAC's covered bytes too) go one
 * packet at a time through gcm_long below, in the same registers: on such a CPU the
 * library's AVX2 code is the alternative, without VAES or VPCLMULQDQ.
 *
 * Opening authenticates first (the tag over the ciphertext, a constant-time comparison)
 * and decrypts only an authentic packet, whose op's status says which. Constant time in
 * the key and the data: AES and carry-less multiplication instructions, no table lookups;
 * branches and copy lengths depend on lengths only. Proven against intel-ipsec-mb's
 * one-packet API and aws-lc-rs by tests/gcm_batch.rs and every AES-GCM known-answer and
 * interop test, which run on this path on such a CPU.
 */
#define _GNU_SOURCE /* explicit_bzero */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "gcm_batch.h"

#define TARGET __attribute__((target("avx2,vaes,vpclmulqdq,aes,pclmul,sse4.1")))

/* As in gcm_batch.c: text blocks at most, the highest power of H a packet needs, where
 * the four-block groups end, and the powers' layout (hdesc[i] = H^(PMAX - i), then zero
 * blocks that a packet's last pair may read past its end). */
#define TEXT_BLOCKS_MAX (ESPGW_GCM_BATCH_TEXT_MAX / 16)
#define SHORT_TEXT_MAX ESPGW_GCM_BATCH_SHORT_TEXT_MAX
/* H^16 .. H^1 for the one-packet pass of longer texts (gcm_long); the four-packet passes
 * need H^(TEXT_BLOCKS_MAX + 2) at most. */
#define PMAX 16
_Static_assert(PMAX >= TEXT_BLOCKS_MAX + 2, "powers for the four-packet passes");
#define HDESC_LEN (PMAX + 6)
_Static_assert(HDESC_LEN * 16 <= ESPGW_GCM_BATCH_KEY_SIZE - 1, "batch key size");

/* The byte-reflection of each 128-bit lane. */
TARGET static inline __m256i reflect2(__m256i x)
{
    return _mm256_shuffle_epi8(
        x, _mm256_broadcastsi128_si256(_mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                                                    13, 14, 15)));
}

/* (lo, mid, hi) -> the products in GF(2^128), byte-reflected, in each 128-bit lane (Gueron
 * and Kounavis, algorithm 5, as reduce4 in gcm_batch.c); two packets' products at once. */
TARGET static inline __m256i reduce2(__m256i lo, __m256i mid, __m256i hi)
{
    __m256i t3 = _mm256_xor_si256(lo, _mm256_bslli_epi128(mid, 8));
    __m256i t6 = _mm256_xor_si256(hi, _mm256_bsrli_epi128(mid, 8));
    __m256i t7 = _mm256_srli_epi32(t3, 31);
    __m256i t8 = _mm256_srli_epi32(t6, 31);
    t3 = _mm256_slli_epi32(t3, 1);
    t6 = _mm256_slli_epi32(t6, 1);
    __m256i t9 = _mm256_bsrli_epi128(t7, 12);
    t8 = _mm256_bslli_epi128(t8, 4);
    t7 = _mm256_bslli_epi128(t7, 4);
    t3 = _mm256_or_si256(t3, t7);
    t6 = _mm256_or_si256(_mm256_or_si256(t6, t8), t9);
    t7 = _mm256_xor_si256(_mm256_xor_si256(_mm256_slli_epi32(t3, 31), _mm256_slli_epi32(t3, 30)),
                          _mm256_slli_epi32(t3, 25));
    t8 = _mm256_bsrli_epi128(t7, 4);
    t7 = _mm256_bslli_epi128(t7, 12);
    t3 = _mm256_xor_si256(t3, t7);
    __m256i t2 = _mm256_xor_si256(
        _mm256_xor_si256(_mm256_srli_epi32(t3, 1), _mm256_srli_epi32(t3, 2)),
        _mm256_srli_epi32(t3, 7));
    t2 = _mm256_xor_si256(t2, t8);
    t3 = _mm256_xor_si256(t3, t2);
    return _mm256_xor_si256(t6, t3);
}

/* a * b in GF(2^128), byte-reflected (for the powers of H, once per key). */
TARGET static __m128i gfmul(__m128i a, __m128i b)
{
    __m256i x = _mm256_broadcastsi128_si256(a), y = _mm256_broadcastsi128_si256(b);
    __m256i mid = _mm256_xor_si256(_mm256_clmulepi64_epi128(x, y, 0x01),
                                   _mm256_clmulepi64_epi128(x, y, 0x10));
    return _mm256_castsi256_si128(reduce2(_mm256_clmulepi64_epi128(x, y, 0x00), mid,
                                          _mm256_clmulepi64_epi128(x, y, 0x11)));
}

/* The AES round keys as the library expanded them, each in both lanes. */
struct round_keys {
    __m256i k[15];
    int rounds;
};

TARGET static inline void load_round_keys(const struct gcm_key_data *kd, uint32_t key_bytes,
                                          struct round_keys *rk)
{
    rk->rounds = key_bytes == 16 ? 10 : key_bytes == 24 ? 12 : 14;
    for (int r = 0; r <= rk->rounds; r++)
        rk->k[r] = _mm256_broadcastsi128_si256(
            _mm_loadu_si128((const __m128i *)(kd->expanded_keys + 16 * r)));
}

TARGET void espgw_gcm_batch_key_avx2(const struct gcm_key_data *kd, uint32_t key_bytes,
                                     uint8_t *out)
{
    struct round_keys rk;
    load_round_keys(kd, key_bytes, &rk);
    /* H = E(K, 0^128), byte-reflected; then H^2 .. H^PMAX. */
    __m128i b = _mm256_castsi256_si128(rk.k[0]);
    for (int r = 1; r < rk.rounds; r++)
        b = _mm_aesenc_si128(b, _mm256_castsi256_si128(rk.k[r]));
    b = _mm_aesenclast_si128(b, _mm256_castsi256_si128(rk.k[rk.rounds]));
    __m128i h = _mm256_castsi256_si128(reflect2(_mm256_castsi128_si256(b)));
    __m128i p = h;
    for (int e = 1; e <= PMAX; e++) {
        _mm_storeu_si128((__m128i *)(out + 16 * (PMAX - e)), p);
        p = gfmul(p, h);
    }
    explicit_bzero(&rk, sizeof(rk));
    explicit_bzero(&h, sizeof(h));
    explicit_bzero(&p, sizeof(p));
    explicit_bzero(&b, sizeof(b));
}

/* Bytes below `n` (clamped to 0..32) all ones, the rest zero. */
TARGET static inline __m256i first_bytes(int64_t n)
{
    int64_t r = n < 0 ? 0 : n > 32 ? 32 : n;
    const __m256i idx = _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                                         16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29,
                                         30, 31);
    return _mm256_cmpgt_epi8(_mm256_set1_epi8((char)r), idx);
}

/* The bytes p[off .. len) in the first min(len - off, 32) bytes of the result, zero after
 * them; reads no byte outside them (and forms no pointer past p + len). A whole chunk is
 * one load, half of one a 128-bit load; another partial one a dword-masked load (which
 * never touches, nor faults on, the dwords it leaves out) and its last one to three
 * bytes one at a time (ESP's texts and ICVs are whole dwords: no such bytes). Loaded from
 * the packet rather than through a copy to the stack, whose narrower stores the 256-bit
 * loads could not be forwarded from (`perf`: a fifth of the kernel's time on that load). */
TARGET static inline __m256i load_upto32(const uint8_t *base, int64_t off, int64_t len)
{
    int64_t rem = len - off;
    if (rem >= 32)
        return _mm256_loadu_si256((const __m256i *)(base + off));
    /* Half a chunk (a 16-byte tag; the last 16 bytes of a 48-byte text, a 64-byte frame's):
     * one 128-bit load, not a masked one. */
    if (rem == 16)
        return _mm256_set_m128i(_mm_setzero_si128(),
                                _mm_loadu_si128((const __m128i *)(base + off)));
    if (rem <= 0)
        return _mm256_setzero_si256();
    const uint8_t *p = base + off;
    const __m256i dword_idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    int32_t whole = (int32_t)(rem >> 2);
    __m256i v = _mm256_maskload_epi32(
        (const int *)p, _mm256_cmpgt_epi32(_mm256_set1_epi32(whole), dword_idx));
    uint32_t tail = (uint32_t)(rem & 3), w = 0;
    if (tail) {
        for (uint32_t b = 0; b < tail; b++)
            w |= (uint32_t)p[4 * whole + b] << (8 * b);
        v = _mm256_or_si256(v, _mm256_and_si256(_mm256_set1_epi32((int)w),
                                                _mm256_cmpeq_epi32(_mm256_set1_epi32(whole),
                                                                   dword_idx)));
    }
    return v;
}

/* Writes the first min(len - off, 32) bytes of `v` to base[off ..], no byte past
 * base + len. A whole chunk is one store, half of one a 128-bit store; another partial one
 * goes through a 32-byte stack slot in two overlapping pieces of 16, 8 or 4 bytes (or
 * bytes), each read back from within that one store, so that the reads are forwarded from
 * it (a copy of the whole text from a stack buffer, whose pieces straddle two stores, was
 * a tenth of the 64-byte profile). */
TARGET static inline void store_upto32(uint8_t *base, int64_t off, int64_t len, __m256i v)
{
    int64_t rem = len - off;
    if (rem >= 32) {
        _mm256_storeu_si256((__m256i *)(base + off), v);
        return;
    }
    /* Half a chunk, as in load_upto32: one 128-bit store, not two through the stack. */
    if (rem == 16) {
        _mm_storeu_si128((__m128i *)(base + off), _mm256_castsi256_si128(v));
        return;
    }
    if (rem <= 0)
        return;
    uint8_t *p = base + off;
    __attribute__((aligned(32))) uint8_t t[32];
    _mm256_store_si256((__m256i *)t, v);
    if (rem >= 16) {
        memcpy(p, t, 16);
        memcpy(p + rem - 16, t + rem - 16, 16);
    } else if (rem >= 8) {
        memcpy(p, t, 8);
        memcpy(p + rem - 8, t + rem - 8, 8);
    } else if (rem >= 4) {
        memcpy(p, t, 4);
        memcpy(p + rem - 4, t + rem - 4, 4);
    } else {
        for (int64_t b = 0; b < rem; b++)
            p[b] = t[b];
    }
}

/* Whether the first `n` (1-16) bytes of `a` equal the `n` bytes at `b`, in time that
 * depends on n alone. */
TARGET static inline int tag_equal(__m128i a, const uint8_t *b, uint32_t n)
{
    __m128i theirs = _mm256_castsi256_si128(load_upto32(b, 0, n));
    __m128i mask = _mm256_castsi256_si128(first_bytes(n));
    __m128i x = _mm_and_si128(_mm_xor_si128(a, theirs), mask);
    return _mm_testz_si128(x, x);
}

/* Chains s[a .. b) through AES (both blocks of each). */
TARGET static inline __attribute__((always_inline)) void
aes_chains(const struct round_keys *rk, __m256i *s, uint32_t a, uint32_t b)
{
    for (uint32_t z = a; z < b; z++)
        s[z] = _mm256_xor_si256(s[z], rk->k[0]);
    for (int r = 1; r < rk->rounds; r++)
        for (uint32_t z = a; z < b; z++)
            s[z] = _mm256_aesenc_epi128(s[z], rk->k[r]);
    for (uint32_t z = a; z < b; z++)
        s[z] = _mm256_aesenclast_epi128(s[z], rk->k[rk->rounds]);
}

/* Up to four ops (`o[0..n]`), each with at most 2 * `cpp` blocks of text (`cpp` 2, 3 or
 * 4: up to 64, 96 or 128 bytes): their counter blocks encrypted together, each packet's
 * GHASH products, the reductions two packets at a time, then the tags; as run_four in
 * gcm_batch.c. With `gmac`, AES-GMAC (RFC 4543): the text is what the tag covers and stays
 * as it is, only the J0s go through AES, and the tag is always computed and written (the
 * caller compares it). Inlined into one copy per pass, `cpp` and `gmac` constants in each
 * (forced: left to itself gcc made one shared copy with `gmac` a run-time flag, 1.6x
 * slower at 56 bytes). */
TARGET static inline __attribute__((always_inline)) void
run_four(const struct round_keys *rk, const uint8_t *hdesc, int encrypt,
         struct espgw_aead_op *const *o, uint32_t n, uint32_t cpp, int gmac)
{
    /* Chains a packet (two blocks each) and pairs of GHASH blocks a packet (AAD, text,
     * lengths: 6 blocks at most up to 64 bytes of text, 8 up to 96, 10 up to 128). */
    enum { MAX_CPP = 4 };
    const uint32_t pairs = cpp + 1;
    const uint32_t chains = 4 * cpp + 2;
    const __m128i one = _mm_set_epi32(1 << 24, 0, 0, 0);
    /* The nonce's 12 bytes (the op's `iv`, read as 16 within the op: `aad` follows). */
    const __m128i nonce_bytes = _mm_set_epi32(0, -1, -1, -1);
    const __m256i zero = _mm256_setzero_si256();
    __m128i j[4];
    /* s[cpp * i + c]: packet i's blocks 2c + 1, 2c + 2; s[4 * cpp], s[4 * cpp + 1]: the
     * J0s of packets 0, 1 and 2, 3. */
    __m256i s[4 * MAX_CPP + 2];
    for (uint32_t i = 0; i < 4; i++) {
        j[i] = i < n ? _mm_or_si128(_mm_and_si128(_mm_loadu_si128((const __m128i *)o[i]->iv),
                                                  nonce_bytes),
                                    one)
                     : one;
        __m256i ji = _mm256_broadcastsi128_si256(j[i]);
        for (uint32_t c = 0; c < cpp; c++) {
            /* The counter is big-endian, its last byte the top byte of each lane's fourth
             * 32-bit word; J0's is 1, block b's is b + 1, and it never carries here. */
            __m256i step = _mm256_set_epi32((int)((2 * c + 2) << 24), 0, 0, 0,
                                            (int)((2 * c + 1) << 24), 0, 0, 0);
            s[cpp * i + c] = _mm256_add_epi32(ji, step);
        }
    }
    s[4 * cpp] = _mm256_set_m128i(j[1], j[0]);
    s[4 * cpp + 1] = _mm256_set_m128i(j[3], j[2]);
    /* AES-GMAC encrypts no text: only the J0 chains. More chains than the sixteen ymm
     * registers hold beside a round key (the wide pass's eighteen) go in two halves, each
     * kept in registers. */
    const uint32_t first_chain = gmac ? 4 * cpp : 0;
    if (chains - first_chain > 14) {
        const uint32_t half = first_chain + (chains - first_chain) / 2;
        aes_chains(rk, s, first_chain, half);
        aes_chains(rk, s, half, chains);
    } else {
        aes_chains(rk, s, first_chain, chains);
    }

    __m256i out[4][MAX_CPP];
    __m128i lo[4], mid[4], hi[4];
    for (uint32_t i = 0; i < 4; i++) {
        lo[i] = mid[i] = hi[i] = _mm_setzero_si128();
        if (i >= n)
            continue;
        const struct espgw_aead_op *op = o[i];
        uint32_t len = (uint32_t)op->len;
        /* The ciphertext (what GHASH covers) two blocks at a time, zero past the text. */
        __m256i ct[MAX_CPP];
        for (uint32_t c = 0; c < cpp; c++) {
            __m256i t = load_upto32(op->text, 32 * (int64_t)c, len);
            if (gmac) {
                /* AES-GMAC: the bytes themselves are what GHASH covers. */
                ct[c] = t;
                continue;
            }
            out[i][c] = _mm256_and_si256(_mm256_xor_si256(t, s[cpp * i + c]),
                                         first_bytes((int64_t)len - 32 * (int64_t)c));
            ct[c] = encrypt ? out[i][c] : t;
        }
        /* GHASH's blocks X = (AAD, C1 .. Ck, lengths), m = k + 2 of them, X_j times
         * H^(m - j), two to a pair: [AAD C1] [C2 C3] [C4 C5] ... The lengths block (bit
         * lengths, already reflected) goes at X_(k+1). */
        uint32_t k = (len + 15) / 16, m = k + 2;
        __m128i aad = _mm_and_si128(_mm_loadu_si128((const __m128i *)op->aad),
                                    _mm256_castsi256_si128(first_bytes(op->aad_len)));
        /* AES-GMAC's bytes are GCM's AAD (RFC 4543): its bit length goes in the AAD half
         * of the lengths block, and the text half is zero. */
        __m256i lengths = _mm256_broadcastsi128_si256(
            gmac ? _mm_set_epi64x((long long)len * 8, 0)
                 : _mm_set_epi64x((long long)op->aad_len * 8, (long long)len * 8));
        __m256i pos = _mm256_set1_epi64x((long long)(k + 1));
        const uint8_t *h = hdesc + 16 * (PMAX - m);
        __m256i l = zero, md = zero, hh = zero;
        for (uint32_t g = 0; g < pairs; g++) {
            __m256i x = g == 0 ? _mm256_inserti128_si256(_mm256_castsi128_si256(aad),
                                                        _mm256_castsi256_si128(ct[0]), 1)
                               : _mm256_permute2x128_si256(ct[g - 1], g < cpp ? ct[g] : zero,
                                                           0x21);
            __m256i at = _mm256_cmpeq_epi64(
                pos, _mm256_set_epi64x(2 * g + 1, 2 * g + 1, 2 * g, 2 * g));
            x = _mm256_xor_si256(reflect2(x), _mm256_and_si256(at, lengths));
            __m256i hg = _mm256_loadu_si256((const __m256i *)(h + 32 * g));
            l = _mm256_xor_si256(l, _mm256_clmulepi64_epi128(x, hg, 0x00));
            hh = _mm256_xor_si256(hh, _mm256_clmulepi64_epi128(x, hg, 0x11));
            md = _mm256_xor_si256(md, _mm256_xor_si256(_mm256_clmulepi64_epi128(x, hg, 0x01),
                                                       _mm256_clmulepi64_epi128(x, hg, 0x10)));
        }
        lo[i] = _mm_xor_si128(_mm256_castsi256_si128(l), _mm256_extracti128_si256(l, 1));
        mid[i] = _mm_xor_si128(_mm256_castsi256_si128(md), _mm256_extracti128_si256(md, 1));
        hi[i] = _mm_xor_si128(_mm256_castsi256_si128(hh), _mm256_extracti128_si256(hh, 1));
    }
    __m256i tags[2];
    for (uint32_t p = 0; p < 2; p++) {
        __m256i r = reduce2(_mm256_set_m128i(lo[2 * p + 1], lo[2 * p]),
                            _mm256_set_m128i(mid[2 * p + 1], mid[2 * p]),
                            _mm256_set_m128i(hi[2 * p + 1], hi[2 * p]));
        tags[p] = _mm256_xor_si256(reflect2(r), s[4 * cpp + p]);
    }
    for (uint32_t i = 0; i < n; i++) {
        struct espgw_aead_op *op = o[i];
        __m128i tag = (i & 1) ? _mm256_extracti128_si256(tags[i >> 1], 1)
                              : _mm256_castsi256_si128(tags[i >> 1]);
        int write;
        if (encrypt) {
            store_upto32(op->tag, 0, op->tag_len, _mm256_castsi128_si256(tag));
            op->status = ESPGW_OP_DONE;
            write = 1;
        } else if (tag_equal(tag, op->text + op->len, op->tag_len)) {
            op->status = ESPGW_OP_AUTHENTIC;
            write = 1;
        } else {
            op->status = ESPGW_OP_FORGED;
            write = 0;
        }
        if (write && !gmac)
            for (uint32_t c = 0; c < cpp; c++)
                store_upto32(op->text, 32 * (int64_t)c, (int64_t)op->len, out[i][c]);
    }
}

/*
 * Texts longer than the four-packet groups take (more than ESPGW_GCM_BATCH_TEXT_MAX
 * bytes), one packet at a time in 256-bit registers.
 *
 * Why: intel-ipsec-mb 1.3's AVX2 AES-GCM, what such a CPU otherwise runs, has neither VAES
 * nor VPCLMULQDQ: one block per AES instruction and one GHASH product per carry-less
 * multiplication. Here each instruction does two: sixteen counter blocks go through AES as
 * eight independent 256-bit chains, and GHASH takes sixteen blocks at a time against
 * H^16 .. H^1 (the batch data's powers), two to a register, three multiplications a
 * product (Karatsuba), one reduction per sixteen blocks. The carry-less multiplier is the
 * slow unit: on the 2026-12-02 host (AMD EPYC, Zen 3) one 256-bit VPCLMULQDQ issued every
 * 1.92 TSC ticks against one 256-bit VAESENC every 0.41 (a C harness, eight independent
 * chains), so GHASH, not AES, sets the pace. 1,420 bytes sealed in about 620-660 ticks
 * against the library's 910-930 (same harness, alternated, minimum of 2,000 bursts of 64).
 *
 * GHASH's state S (byte-reflected, as everywhere in this file) covers the AAD first (its
 * one block times H), then the text in groups of sixteen blocks, S = (S + X1) H^16 + X2
 * H^15 + ... + X16 H, then at most one group of eight; the last group (what is left of the
 * text, 0-127 bytes, so 0-8 blocks) takes the lengths block too: up to nine blocks.
 *
 * Sealing encrypts and hashes in one pass over the text. Opening hashes the ciphertext
 * first, compares the tag (constant time) and decrypts only an authentic packet, as the
 * four-packet pass does. AES-GMAC hashes the covered bytes as the AAD and encrypts
 * nothing but J0.
 */

/* Swaps the four bytes of each lane's last dword: the block counter, kept native-endian
 * in the register, into the big-endian place GCM gives it. */
TARGET static inline __m256i counter_to_block(__m256i c)
{
    return _mm256_shuffle_epi8(
        c, _mm256_broadcastsi128_si256(
               _mm_set_epi8(12, 13, 14, 15, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)));
}

/* One block through AES (the 128-bit half of the round keys). */
TARGET static inline __m128i aes_one_block(const struct round_keys *rk, __m128i b)
{
    b = _mm_xor_si128(b, _mm256_castsi256_si128(rk->k[0]));
    for (int r = 1; r < rk->rounds; r++)
        b = _mm_aesenc_si128(b, _mm256_castsi256_si128(rk->k[r]));
    return _mm_aesenclast_si128(b, _mm256_castsi256_si128(rk->k[rk->rounds]));
}

/* The keystream of the next 2 * `chains` blocks from `ctr` (two counters, native-endian,
 * in dword 3 of each lane: blocks b and b + 1), which advances past them. */
TARGET static inline void keystream(const struct round_keys *rk, __m256i *ctr, __m256i *s,
                                    int chains)
{
    for (int z = 0; z < chains; z++)
        s[z] = counter_to_block(_mm256_add_epi32(*ctr, _mm256_set_epi32(2 * z, 0, 0, 0,
                                                                         2 * z, 0, 0, 0)));
    *ctr = _mm256_add_epi32(*ctr, _mm256_set_epi32(2 * chains, 0, 0, 0, 2 * chains, 0, 0, 0));
    for (int z = 0; z < chains; z++)
        s[z] = _mm256_xor_si256(s[z], rk->k[0]);
    for (int r = 1; r < rk->rounds; r++)
        for (int z = 0; z < chains; z++)
            s[z] = _mm256_aesenc_epi128(s[z], rk->k[r]);
    for (int z = 0; z < chains; z++)
        s[z] = _mm256_aesenclast_epi128(s[z], rk->k[rk->rounds]);
}

/* Adds the two products x * h (the blocks of x, byte-reflected, times the powers at h) to
 * the sums l, md, hh. Karatsuba: three multiplications a product, not four (the carry-less
 * multiplier is the busiest unit of the GHASH pass); the middle sum gathers
 * (x0 + x1)(h0 + h1), which sum_of_products corrects once by adding lo and hi. */
TARGET static inline void accumulate(__m256i x, const uint8_t *h, __m256i *l, __m256i *md,
                                     __m256i *hh)
{
    __m256i hg = _mm256_loadu_si256((const __m256i *)h);
    __m256i xf = _mm256_xor_si256(x, _mm256_shuffle_epi32(x, 0x4e));
    __m256i hf = _mm256_xor_si256(hg, _mm256_shuffle_epi32(hg, 0x4e));
    *l = _mm256_xor_si256(*l, _mm256_clmulepi64_epi128(x, hg, 0x00));
    *hh = _mm256_xor_si256(*hh, _mm256_clmulepi64_epi128(x, hg, 0x11));
    *md = _mm256_xor_si256(*md, _mm256_clmulepi64_epi128(xf, hf, 0x00));
}

/* The sums of accumulate, both lanes together, reduced: the new GHASH state. */
TARGET static inline __m128i sum_of_products(__m256i l, __m256i md, __m256i hh)
{
    const __m256i zero = _mm256_setzero_si256();
    md = _mm256_xor_si256(md, _mm256_xor_si256(l, hh));
    __m128i lo = _mm_xor_si128(_mm256_castsi256_si128(l), _mm256_extracti128_si256(l, 1));
    __m128i mi = _mm_xor_si128(_mm256_castsi256_si128(md), _mm256_extracti128_si256(md, 1));
    __m128i hi = _mm_xor_si128(_mm256_castsi256_si128(hh), _mm256_extracti128_si256(hh, 1));
    return _mm256_castsi256_si128(reduce2(_mm256_inserti128_si256(zero, lo, 0),
                                          _mm256_inserti128_si256(zero, mi, 0),
                                          _mm256_inserti128_si256(zero, hi, 0)));
}

/* S = (S + X1) H^t + ... for the blocks of `pairs` registers x against the powers at h. */
TARGET static inline __attribute__((always_inline)) __m128i
ghash_pairs(__m128i S, const __m256i *x, const uint8_t *h, int pairs)
{
    const __m256i zero = _mm256_setzero_si256();
    __m256i l = zero, md = zero, hh = zero;
    accumulate(_mm256_xor_si256(x[0], _mm256_inserti128_si256(zero, S, 0)), h, &l, &md, &hh);
    for (int g = 1; g < pairs; g++)
        accumulate(x[g], h + 32 * g, &l, &md, &hh);
    return sum_of_products(l, md, hh);
}

/* S = (S + X1) H^t + X2 H^(t-1) + ... + Xt H for the t blocks in x (two to a register, in
 * order; byte-reflected; zero past the t-th), t from 1 to 2 * LAST_PAIRS (the last group:
 * up to eight blocks of text and the lengths block). One copy per count of registers, so
 * that each keeps x in registers (a loop over a count known only at run time kept them on
 * the stack, a store-forwarding wait on every load). */
#define LAST_PAIRS 5
TARGET static inline __m128i ghash_blocks(__m128i S, const __m256i x[LAST_PAIRS], uint32_t t,
                                          const uint8_t *hdesc)
{
    /* Past the t-th block the powers read are the batch data's zero blocks. */
    const uint8_t *h = hdesc + 16 * (PMAX - t);
    switch ((t + 1) / 2) {
    case 1: return ghash_pairs(S, x, h, 1);
    case 2: return ghash_pairs(S, x, h, 2);
    case 3: return ghash_pairs(S, x, h, 3);
    case 4: return ghash_pairs(S, x, h, 4);
    default: return ghash_pairs(S, x, h, LAST_PAIRS);
    }
}

/* A whole group of 2 * `pairs` blocks `c` (as in the packet, not yet reflected). */
TARGET static inline __attribute__((always_inline)) __m128i
ghash_group(__m128i S, const __m256i *c, int pairs, const uint8_t *hdesc)
{
    __m256i x[8];
    for (int g = 0; g < pairs; g++)
        x[g] = reflect2(c[g]);
    return ghash_pairs(S, x, hdesc + 16 * (PMAX - 2 * pairs), pairs);
}

/* The last group: the `rest` (0-127) bytes of `c` (zero past them), then the lengths
 * block (`lengths`, already reflected). */
TARGET static inline __m128i ghash_last(__m128i S, const __m256i c[4], uint32_t rest,
                                        __m128i lengths, const uint8_t *hdesc)
{
    uint32_t blocks = (rest + 15) / 16;
    /* The lengths block is block `blocks` (0-based), put in place by a compare per
     * register rather than an index (which would keep x on the stack). */
    const __m256i pos = _mm256_set1_epi64x(blocks);
    const __m256i len2 = _mm256_broadcastsi128_si256(lengths);
    __m256i x[LAST_PAIRS];
    for (int g = 0; g < LAST_PAIRS; g++) {
        __m256i at = _mm256_cmpeq_epi64(pos, _mm256_set_epi64x(2 * g + 1, 2 * g + 1, 2 * g, 2 * g));
        x[g] = _mm256_xor_si256(g < 4 ? reflect2(c[g]) : _mm256_setzero_si256(),
                                _mm256_and_si256(at, len2));
    }
    return ghash_blocks(S, x, blocks + 1, hdesc);
}

/* GHASH of `len` bytes at `p` after the state S, with the lengths block: the open's and
 * AES-GMAC's pass (no AES). */
TARGET static inline __m128i ghash_bytes(__m128i S, const uint8_t *p, uint64_t len,
                                         __m128i lengths, const uint8_t *hdesc)
{
    uint64_t off = 0;
    __m256i c[8];
    for (; off + 256 <= len; off += 256) {
        for (int g = 0; g < 8; g++)
            c[g] = _mm256_loadu_si256((const __m256i *)(p + off + 32 * g));
        S = ghash_group(S, c, 8, hdesc);
    }
    if (off + 128 <= len) {
        for (int g = 0; g < 4; g++)
            c[g] = _mm256_loadu_si256((const __m256i *)(p + off + 32 * g));
        S = ghash_group(S, c, 4, hdesc);
        off += 128;
    }
    for (int g = 0; g < 4; g++)
        c[g] = load_upto32(p, (int64_t)(off + 32 * g), (int64_t)len);
    return ghash_last(S, c, (uint32_t)(len - off), lengths, hdesc);
}

/* Counter mode over 64 * `chains` whole bytes at `p` in place; with `hash`, GHASH of the
 * ciphertext made. */
TARGET static inline __m128i ctr_group(const struct round_keys *rk, const uint8_t *hdesc,
                                       __m256i *ctr, uint8_t *p, int chains, int hash,
                                       __m128i S)
{
    __m256i s[8], c[8];
    keystream(rk, ctr, s, chains);
    for (int g = 0; g < chains; g++) {
        __m256i *at = (__m256i *)(p + 32 * g);
        c[g] = _mm256_xor_si256(_mm256_loadu_si256(at), s[g]);
        _mm256_storeu_si256(at, c[g]);
    }
    return hash ? ghash_group(S, c, chains, hdesc) : S;
}

/* Counter mode over the text in place from block 1 (counter 2); with `hash`, GHASH of the
 * ciphertext as it is made (sealing), whose final state is returned. */
TARGET static inline __m128i ctr_text(const struct round_keys *rk, const uint8_t *hdesc,
                                      __m128i nonce, uint8_t *p, uint64_t len, int hash,
                                      __m128i S, __m128i lengths)
{
    __m256i ctr = _mm256_set_m128i(_mm_insert_epi32(nonce, 3, 3), _mm_insert_epi32(nonce, 2, 3));
    uint64_t off = 0;
    for (; off + 256 <= len; off += 256)
        S = ctr_group(rk, hdesc, &ctr, p + off, 8, hash, S);
    if (off + 128 <= len) {
        S = ctr_group(rk, hdesc, &ctr, p + off, 4, hash, S);
        off += 128;
    }
    uint32_t rest = (uint32_t)(len - off);
    __m256i s[4], c[4];
    /* The last 0-127 bytes: as many chains as they need (each covers 32). */
    uint32_t chains = (rest + 31) / 32;
    for (uint32_t g = 0; g < 4; g++)
        s[g] = _mm256_setzero_si256();
    /* One copy per count, each with its chains in registers. */
    switch (chains) {
    case 0: break;
    case 1: keystream(rk, &ctr, s, 1); break;
    case 2: keystream(rk, &ctr, s, 2); break;
    case 3: keystream(rk, &ctr, s, 3); break;
    default: keystream(rk, &ctr, s, 4); break;
    }
    for (int g = 0; g < 4; g++) {
        int64_t at = (int64_t)(off + 32 * g);
        c[g] = _mm256_and_si256(_mm256_xor_si256(load_upto32(p, at, (int64_t)len), s[g]),
                                first_bytes((int64_t)len - at));
        store_upto32(p, at, (int64_t)len, c[g]);
    }
    return hash ? ghash_last(S, c, rest, lengths, hdesc) : S;
}

/* One op, its text longer than the four-packet groups take: sealed (encrypt), opened, or,
 * with `gmac`, its AES-GMAC tag computed over its text. Status as in run_four. */
TARGET static void gcm_long(const struct round_keys *rk, const uint8_t *hdesc, int encrypt,
                            struct espgw_aead_op *op, int gmac)
{
    const __m128i nonce =
        _mm_and_si128(_mm_loadu_si128((const __m128i *)op->iv), _mm_set_epi32(0, -1, -1, -1));
    const __m128i ek_j0 = aes_one_block(rk, _mm_insert_epi32(nonce, 1 << 24, 3));
    const __m128i reflect = _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const uint64_t len = op->len;
    __m128i S = _mm_setzero_si128();
    if (!gmac && op->aad_len > 0) {
        __m128i aad = _mm_and_si128(_mm_loadu_si128((const __m128i *)op->aad),
                                    _mm256_castsi256_si128(first_bytes(op->aad_len)));
        S = gfmul(_mm_shuffle_epi8(aad, reflect),
                  _mm_loadu_si128((const __m128i *)(hdesc + 16 * (PMAX - 1))));
    }
    /* The bit lengths (AAD, text), reflected: the text's in the low half. AES-GMAC's bytes
     * are GCM's AAD (RFC 4543), so their length goes in the AAD half. */
    const __m128i lengths = gmac ? _mm_set_epi64x((long long)(len * 8), 0)
                                 : _mm_set_epi64x((long long)op->aad_len * 8, (long long)(len * 8));
    if (encrypt && !gmac) {
        S = ctr_text(rk, hdesc, nonce, op->text, len, 1, S, lengths);
        __m128i tag = _mm_xor_si128(_mm_shuffle_epi8(S, reflect), ek_j0);
        store_upto32(op->tag, 0, op->tag_len, _mm256_castsi128_si256(tag));
        op->status = ESPGW_OP_DONE;
        return;
    }
    S = ghash_bytes(S, op->text, len, lengths, hdesc);
    __m128i tag = _mm_xor_si128(_mm_shuffle_epi8(S, reflect), ek_j0);
    if (gmac) {
        store_upto32(op->tag, 0, op->tag_len, _mm256_castsi128_si256(tag));
        op->status = ESPGW_OP_DONE;
    } else if (tag_equal(tag, op->text + len, op->tag_len)) {
        op->status = ESPGW_OP_AUTHENTIC;
        ctr_text(rk, hdesc, nonce, op->text, len, 0, S, lengths);
    } else {
        op->status = ESPGW_OP_FORGED;
    }
}

/* The longest text gcm_long takes (far past any packet; its 32-bit block counter never
 * wraps below 2^36 bytes). */
#define LONG_TEXT_MAX (1u << 24)

/* Whether an op goes through gcm_long: a text longer than the four-packet groups take,
 * AAD and tag as theirs. */
static inline int long_eligible(const struct espgw_aead_op *op)
{
    return op->len > ESPGW_GCM_BATCH_TEXT_MAX && op->len <= LONG_TEXT_MAX && op->aad_len <= 12 &&
           op->tag_len >= 1 && op->tag_len <= 16;
}

/* The longest text of the middle pass: three chains a packet (six blocks), where the
 * wide pass runs four. */
#define MID_TEXT_MAX 96
_Static_assert(ESPGW_GCM_BATCH_SHORT_TEXT_MAX < MID_TEXT_MAX &&
                   MID_TEXT_MAX < ESPGW_GCM_BATCH_TEXT_MAX,
               "the middle pass lies between the short and the wide one");

/* Whether every op of a wide group (texts of 65-128 bytes) fits the middle pass. */
static inline int all_mid(struct espgw_aead_op *const *o, uint32_t n)
{
    uint32_t longest = 0;
    for (uint32_t i = 0; i < n; i++)
        longest = o[i]->len > longest ? (uint32_t)o[i]->len : longest;
    return longest <= MID_TEXT_MAX;
}

/* The passes, `cpp` and `gmac` constants in each (run_four is forced inline). A wide group
 * whose texts all fit six blocks goes through three chains a packet, not four: an IPsec
 * IMIX's 90- and 92-byte frames (76 bytes of text, 5 blocks) then skip a quarter of the
 * wide pass's AES and a fifth of its carry-less multiplications. The driver sorts by the
 * 64-byte limit only, so the choice is made here, per group. */
#define PASS(name, gmac)                                                                  \
    TARGET static void name##_short(const void *rk, const uint8_t *hdesc, int encrypt,    \
                                    struct espgw_aead_op *const *o, uint32_t n)           \
    {                                                                                     \
        run_four(rk, hdesc, encrypt, o, n, 2, gmac);                                      \
    }                                                                                     \
    TARGET static void name##_wide(const void *rk, const uint8_t *hdesc, int encrypt,     \
                                   struct espgw_aead_op *const *o, uint32_t n)            \
    {                                                                                     \
        if (all_mid(o, n))                                                                \
            run_four(rk, hdesc, encrypt, o, n, 3, gmac);                                  \
        else                                                                              \
            run_four(rk, hdesc, encrypt, o, n, 4, gmac);                                  \
    }
PASS(gcm_four, 0)
PASS(gmac_four, 1)
#undef PASS

/* The eligible ops of `ops` through the driver (espgw_gcm_batch_in_fours) with a pair of
 * passes, under the key's round keys, which are wiped after. */
TARGET static uint32_t in_fours(const struct gcm_key_data *kd, uint32_t key_bytes,
                                const uint8_t *hdesc, int encrypt, struct espgw_aead_op *ops,
                                uint32_t n, espgw_gcm_four_fn run_short,
                                espgw_gcm_four_fn run_wide, int gmac)
{
    struct round_keys rk;
    load_round_keys(kd, key_bytes, &rk);
    uint32_t done = espgw_gcm_batch_in_fours(&rk, hdesc, encrypt, ops, n, run_short, run_wide);
    for (uint32_t i = 0; i < n; i++)
        if (long_eligible(&ops[i])) {
            gcm_long(&rk, hdesc, encrypt, &ops[i], gmac);
            done++;
        }
    explicit_bzero(&rk, sizeof(rk));
    return done;
}

/* As espgw_gcm_batch (gcm_batch.c dispatches here): the eligible ops four at a time,
 * short and wide texts in separate groups. */
TARGET uint32_t espgw_gcm_batch_avx2(const uint8_t *hdesc, const struct gcm_key_data *kd,
                                     uint32_t key_bytes, int encrypt,
                                     struct espgw_aead_op *ops, uint32_t n)
{
    return in_fours(kd, key_bytes, hdesc, encrypt, ops, n, gcm_four_short, gcm_four_wide, 0);
}

/* As espgw_gmac_batch (gcm_batch.c dispatches here): the eligible ops' tags four at a
 * time, their bytes left as they are. */
TARGET uint32_t espgw_gmac_batch_avx2(const uint8_t *hdesc, const struct gcm_key_data *kd,
                                      uint32_t key_bytes, struct espgw_aead_op *ops, uint32_t n)
{
    return in_fours(kd, key_bytes, hdesc, 1, ops, n, gmac_four_short, gmac_four_wide, 1);
}
