/*
 * ChaCha20-Poly1305 (RFC 8439 §2.8; ESP as RFC 7634), a burst's packets at once (espgw's
 * own multi-buffer kernel, AVX-512, or AVX2 on a CPU without it).
 *
 * Why: intel-ipsec-mb 1.3 runs ChaCha20-Poly1305 one packet per job, and a short packet
 * costs nearly what a long one does: in a C harness (bursts of 64 seals, TSC ticks a
 * packet, the best of 3,000 bursts) the library took 408-433 ticks for 48 bytes of text,
 * 600 for 256 and 1,140 for 1,024; in `bench dataplane` at 64 bytes it was 57 % of the
 * outbound profile (3.5 Mpps, where AES-128-GCM runs at 10.5). ChaCha20 is made for SIMD
 * lanes, each lane one 64-byte block of its own (key, counter, nonce), and Poly1305 for
 * one packet is a chain of dependent multiplications, so both are run across packets:
 *   - every block of the burst, whichever packet it belongs to, is one lane of a 16-lane
 *     ChaCha20 pass in 512-bit registers (the state's sixteen words, a register each, a
 *     lane each block): first the Poly1305 one-time keys (counter 0) of sixteen packets a
 *     pass, then the texts' blocks (counters 1, 2, ...) sixteen at a time, the lanes of a
 *     pass taken by consecutive blocks of consecutive packets, so no lane waits for a
 *     longer packet (on a CPU with AVX2 but not AVX-512, the same pass as two of eight
 *     lanes in 256-bit registers: in the pipeline 1.3-1.4x the library at 64-byte frames,
 *     level at 200, where the library ran its AVX-512 code);
 *   - Poly1305 runs eight packets at once in AVX-512 IFMA (52-bit multiply-add; radix
 *     2^44, one packet a 64-bit lane), or, on a CPU without IFMA, in 64-bit arithmetic
 *     (radix 2^64), two packets interleaved.
 * The same harness: 146 ticks at 48 bytes (2.8x the library), 307 at 256, 966 at 1,024,
 * 1,302 at 1,400 (level). In the pipeline (`bench dataplane`, kernel and library
 * alternated, five rounds) the kernel is 1.5-1.7x at 64-byte frames and 1.2x at 1,024,
 * and 5-10 % behind at 1,420, so it takes texts up to ESPGW_CHACHA_BATCH_TEXT_MAX (1,024
 * bytes); with the 64-bit Poly1305 the library is ahead from about 300 bytes of text,
 * hence ESPGW_CHACHA_BATCH_SCALAR_TEXT_MAX (docs/performance.md, "ChaCha20-Poly1305, a
 * burst at once").
 *
 * Opening authenticates first: the tag is computed over the ciphertext and compared with
 * the received one in constant time, and only an authentic packet's text is decrypted.
 *
 * Everything here is constant time in the key and the data: additions, rotations and
 * multiplications, masked loads and stores chosen by lengths only, no table lookups, no
 * branch on a secret. The keystream, the one-time keys and the Poly1305 state are wiped
 * before returning. Proven against RFC 8439's vectors (src/chacha_batch.rs, both
 * Poly1305s), RFC 7634's ESP example, intel-ipsec-mb and aws-lc-rs (tests/esp_kat.rs,
 * tests/chacha_batch.rs), which run on this path by default where the CPU has AVX-512 or
 * AVX2 (and src/chacha_batch.rs runs each narrower path on a CPU with the wider one).
 */
#define _GNU_SOURCE /* explicit_bzero */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "chacha_batch.h"

#define TARGET __attribute__((target("avx512f,avx512bw")))

#define LANES 16
/* Ops handled together: their one-time keys are kept for the Poly1305 pass. */
#define CHUNK 64

static inline uint32_t le32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4); /* x86: little-endian */
    return v;
}

static inline uint64_t le64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline void put_le64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

/* The widest ChaCha20 this CPU runs, asked once (see ifma_supported on the race). */
int espgw_chacha_batch_isa(void)
{
    static int cached = -1;
    int known = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (known < 0) {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))
            known = ESPGW_CHACHA_ISA_AVX512;
        else if (__builtin_cpu_supports("avx2"))
            known = ESPGW_CHACHA_ISA_AVX2;
        else
            known = 0;
        __atomic_store_n(&cached, known, __ATOMIC_RELAXED);
    }
    return known;
}

/* One pass: the block counter and nonce of each lane. Lanes not in use compute a block
 * nobody reads. */
struct lanes {
    uint32_t counter[LANES];
    uint32_t nonce[3][LANES];
};

static inline void lane_set(struct lanes *l, unsigned lane, uint32_t counter, const uint8_t *nonce)
{
    l->counter[lane] = counter;
    l->nonce[0][lane] = le32(nonce);
    l->nonce[1][lane] = le32(nonce + 4);
    l->nonce[2][lane] = le32(nonce + 8);
}

#define ROTL(v, n) _mm512_rol_epi32((v), (n))
#define QR(a, b, c, d)                                           \
    do {                                                         \
        x[a] = _mm512_add_epi32(x[a], x[b]);                     \
        x[d] = ROTL(_mm512_xor_si512(x[d], x[a]), 16);           \
        x[c] = _mm512_add_epi32(x[c], x[d]);                     \
        x[b] = ROTL(_mm512_xor_si512(x[b], x[c]), 12);           \
        x[a] = _mm512_add_epi32(x[a], x[b]);                     \
        x[d] = ROTL(_mm512_xor_si512(x[d], x[a]), 8);            \
        x[c] = _mm512_add_epi32(x[c], x[d]);                     \
        x[b] = ROTL(_mm512_xor_si512(x[b], x[c]), 7);            \
    } while (0)

/*
 * Sixteen ChaCha20 blocks (RFC 8439 §2.3), lane i's into out[i]. The state's word w of
 * every lane sits in register x[w]; after the rounds a 16x16 transposition of 32-bit
 * words (within 128-bit lanes, then across them) turns the registers into blocks.
 */
TARGET static void chacha_blocks(const uint32_t key[8], const struct lanes *l,
                                 uint8_t out[LANES][64])
{
    static const uint32_t sigma[4] = { 0x61707865, 0x3320646e, 0x79622d32, 0x6b206574 };
    __m512i x[16], in[16];

    for (int w = 0; w < 4; w++)
        in[w] = _mm512_set1_epi32((int)sigma[w]);
    for (int w = 0; w < 8; w++)
        in[4 + w] = _mm512_set1_epi32((int)key[w]);
    in[12] = _mm512_loadu_si512(l->counter);
    for (int w = 0; w < 3; w++)
        in[13 + w] = _mm512_loadu_si512(l->nonce[w]);
    for (int w = 0; w < 16; w++)
        x[w] = in[w];
    for (int r = 0; r < 10; r++) {
        QR(0, 4, 8, 12);
        QR(1, 5, 9, 13);
        QR(2, 6, 10, 14);
        QR(3, 7, 11, 15);
        QR(0, 5, 10, 15);
        QR(1, 6, 11, 12);
        QR(2, 7, 8, 13);
        QR(3, 4, 9, 14);
    }
    for (int w = 0; w < 16; w++)
        x[w] = _mm512_add_epi32(x[w], in[w]);

    /* Within each 128-bit lane j: pairs of words, then quads. Afterwards register
     * q[4g + k] holds, in its 128-bit lane j, words 4g..4g+3 of block 4j + k. */
    __m512i t[16], q[16];
    for (int p = 0; p < 16; p += 4) {
        t[p] = _mm512_unpacklo_epi32(x[p], x[p + 1]);
        t[p + 1] = _mm512_unpackhi_epi32(x[p], x[p + 1]);
        t[p + 2] = _mm512_unpacklo_epi32(x[p + 2], x[p + 3]);
        t[p + 3] = _mm512_unpackhi_epi32(x[p + 2], x[p + 3]);
        q[p] = _mm512_unpacklo_epi64(t[p], t[p + 2]);
        q[p + 1] = _mm512_unpackhi_epi64(t[p], t[p + 2]);
        q[p + 2] = _mm512_unpacklo_epi64(t[p + 1], t[p + 3]);
        q[p + 3] = _mm512_unpackhi_epi64(t[p + 1], t[p + 3]);
    }
    /* Across the 128-bit lanes: block 4j + k is lane j of q[k], q[4 + k], q[8 + k],
     * q[12 + k], in that order. */
    for (int k = 0; k < 4; k++) {
        __m512i a = _mm512_shuffle_i32x4(q[k], q[4 + k], 0x44);
        __m512i b = _mm512_shuffle_i32x4(q[k], q[4 + k], 0xee);
        __m512i c = _mm512_shuffle_i32x4(q[8 + k], q[12 + k], 0x44);
        __m512i d = _mm512_shuffle_i32x4(q[8 + k], q[12 + k], 0xee);
        _mm512_storeu_si512(out[k], _mm512_shuffle_i32x4(a, c, 0x88));
        _mm512_storeu_si512(out[4 + k], _mm512_shuffle_i32x4(a, c, 0xdd));
        _mm512_storeu_si512(out[8 + k], _mm512_shuffle_i32x4(b, d, 0x88));
        _mm512_storeu_si512(out[12 + k], _mm512_shuffle_i32x4(b, d, 0xdd));
    }
}

/* Byte mask of the first `n` (at most 64) bytes. */
static inline __mmask64 first_bytes(uint32_t n)
{
    return n >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << n) - 1);
}

/* XORs keystream block `ks` into the `n` (1-64) bytes at `p`. */
TARGET static inline void xor_block(uint8_t *p, uint32_t n, const uint8_t ks[64])
{
    __mmask64 m = first_bytes(n);
    __m512i v = _mm512_maskz_loadu_epi8(m, p);
    v = _mm512_xor_si512(v, _mm512_loadu_si512(ks));
    _mm512_mask_storeu_epi8(p, m, v);
}

/* XORs lane j's keystream block into the `bytes[j]` bytes at `where[j]`, for the first
 * `used` lanes. */
TARGET static void xor_lanes512(uint8_t *const where[LANES], const uint32_t bytes[LANES],
                                uint8_t ks[LANES][64], unsigned used)
{
    for (unsigned j = 0; j < used; j++)
        xor_block(where[j], bytes[j], ks[j]);
}

/*
 * The same on a CPU with AVX2 but not AVX-512 (AMD Zen 2 and 3, Intel's E-cores), where
 * intel-ipsec-mb's one-packet-per-job ChaCha20-Poly1305 runs its AVX2 code: eight lanes
 * a register, a pass of sixteen blocks done as two of eight (the second only when more
 * than eight lanes are in use). Rotations by 16 and 8 are byte shuffles; by 12 and 7,
 * two shifts.
 */
#define TARGET_AVX2 __attribute__((target("avx2")))
#define ROTL8X(v, n) _mm256_or_si256(_mm256_slli_epi32((v), (n)), _mm256_srli_epi32((v), 32 - (n)))
#define QR8(a, b, c, d)                                                                  \
    do {                                                                                 \
        x[a] = _mm256_add_epi32(x[a], x[b]);                                             \
        x[d] = _mm256_shuffle_epi8(_mm256_xor_si256(x[d], x[a]), rot16);                 \
        x[c] = _mm256_add_epi32(x[c], x[d]);                                             \
        x[b] = ROTL8X(_mm256_xor_si256(x[b], x[c]), 12);                                 \
        x[a] = _mm256_add_epi32(x[a], x[b]);                                             \
        x[d] = _mm256_shuffle_epi8(_mm256_xor_si256(x[d], x[a]), rot8);                  \
        x[c] = _mm256_add_epi32(x[c], x[d]);                                             \
        x[b] = ROTL8X(_mm256_xor_si256(x[b], x[c]), 7);                                  \
    } while (0)

/* Eight ChaCha20 blocks, lanes `first` to `first + 7` of `l`, into out[0..8]. As in
 * chacha_blocks, the words are then transposed: within each 128-bit half h, register
 * q[4g + k] holds words 4g..4g+3 of block 4h + k; the halves are then paired up. */
TARGET_AVX2 static void chacha_blocks8(const uint32_t key[8], const struct lanes *l,
                                       unsigned first, uint8_t out[8][64])
{
    static const uint32_t sigma[4] = { 0x61707865, 0x3320646e, 0x79622d32, 0x6b206574 };
    const __m256i rot16 = _mm256_set_epi8(13, 12, 15, 14, 9, 8, 11, 10, 5, 4, 7, 6, 1, 0, 3, 2,
                                          13, 12, 15, 14, 9, 8, 11, 10, 5, 4, 7, 6, 1, 0, 3, 2);
    const __m256i rot8 = _mm256_set_epi8(14, 13, 12, 15, 10, 9, 8, 11, 6, 5, 4, 7, 2, 1, 0, 3,
                                         14, 13, 12, 15, 10, 9, 8, 11, 6, 5, 4, 7, 2, 1, 0, 3);
    __m256i x[16], in[16];

    for (int w = 0; w < 4; w++)
        in[w] = _mm256_set1_epi32((int)sigma[w]);
    for (int w = 0; w < 8; w++)
        in[4 + w] = _mm256_set1_epi32((int)key[w]);
    in[12] = _mm256_loadu_si256((const __m256i *)(l->counter + first));
    for (int w = 0; w < 3; w++)
        in[13 + w] = _mm256_loadu_si256((const __m256i *)(l->nonce[w] + first));
    for (int w = 0; w < 16; w++)
        x[w] = in[w];
    for (int r = 0; r < 10; r++) {
        QR8(0, 4, 8, 12);
        QR8(1, 5, 9, 13);
        QR8(2, 6, 10, 14);
        QR8(3, 7, 11, 15);
        QR8(0, 5, 10, 15);
        QR8(1, 6, 11, 12);
        QR8(2, 7, 8, 13);
        QR8(3, 4, 9, 14);
    }
    for (int w = 0; w < 16; w++)
        x[w] = _mm256_add_epi32(x[w], in[w]);

    __m256i t[16], q[16];
    for (int p = 0; p < 16; p += 4) {
        t[p] = _mm256_unpacklo_epi32(x[p], x[p + 1]);
        t[p + 1] = _mm256_unpackhi_epi32(x[p], x[p + 1]);
        t[p + 2] = _mm256_unpacklo_epi32(x[p + 2], x[p + 3]);
        t[p + 3] = _mm256_unpackhi_epi32(x[p + 2], x[p + 3]);
        q[p] = _mm256_unpacklo_epi64(t[p], t[p + 2]);
        q[p + 1] = _mm256_unpackhi_epi64(t[p], t[p + 2]);
        q[p + 2] = _mm256_unpacklo_epi64(t[p + 1], t[p + 3]);
        q[p + 3] = _mm256_unpackhi_epi64(t[p + 1], t[p + 3]);
    }
    /* Block 4h + k: half h of q[k], q[4 + k] (words 0-7), then of q[8 + k], q[12 + k]. */
    for (int k = 0; k < 4; k++) {
        _mm256_storeu_si256((__m256i *)out[k], _mm256_permute2x128_si256(q[k], q[4 + k], 0x20));
        _mm256_storeu_si256((__m256i *)(out[k] + 32),
                            _mm256_permute2x128_si256(q[8 + k], q[12 + k], 0x20));
        _mm256_storeu_si256((__m256i *)out[4 + k],
                            _mm256_permute2x128_si256(q[k], q[4 + k], 0x31));
        _mm256_storeu_si256((__m256i *)(out[4 + k] + 32),
                            _mm256_permute2x128_si256(q[8 + k], q[12 + k], 0x31));
    }
}

/* The blocks of the first `used` lanes of `l` into ks[0..used], in AVX-512 or AVX2. */
static void blocks(const uint32_t key[8], const struct lanes *l, uint8_t ks[LANES][64],
                   unsigned used, int avx512)
{
    if (avx512) {
        chacha_blocks(key, l, ks);
        return;
    }
    chacha_blocks8(key, l, 0, ks);
    if (used > 8)
        chacha_blocks8(key, l, 8, ks + 8);
}

/* XORs keystream block `ks` into the `n` (0-64) bytes at `p`: whole 32-byte halves in
 * AVX2, the rest eight bytes, then one, at a time (the lengths are not secret). */
TARGET_AVX2 static void xor_lanes_avx2(uint8_t *const where[LANES], const uint32_t bytes[LANES],
                                       uint8_t ks[LANES][64], unsigned used)
{
    for (unsigned j = 0; j < used; j++) {
        uint8_t *p = where[j];
        uint32_t n = bytes[j], i = 0;
        for (; i + 32 <= n; i += 32) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(p + i));
            v = _mm256_xor_si256(v, _mm256_loadu_si256((const __m256i *)(ks[j] + i)));
            _mm256_storeu_si256((__m256i *)(p + i), v);
        }
        for (; i + 8 <= n; i += 8) {
            uint64_t a, b;
            memcpy(&a, p + i, 8);
            memcpy(&b, ks[j] + i, 8);
            a ^= b;
            memcpy(p + i, &a, 8);
        }
        for (; i < n; i++)
            p[i] ^= ks[j][i];
    }
}

static void xor_lanes(uint8_t *const where[LANES], const uint32_t bytes[LANES],
                      uint8_t ks[LANES][64], unsigned used, int avx512)
{
    if (avx512)
        xor_lanes512(where, bytes, ks, used);
    else
        xor_lanes_avx2(where, bytes, ks, used);
}

/* Encrypts or decrypts (the same) the texts of the ops whose `run[i]` is set: counter 1
 * onwards, the blocks of all of them sixteen to a pass. */
static void crypt_texts(const uint32_t key[8], struct espgw_chacha_op *ops, const uint8_t *run,
                        uint32_t n, uint8_t ks[LANES][64], int avx512)
{
    struct lanes l;
    uint8_t *where[LANES];
    uint32_t bytes[LANES];
    unsigned used = 0;

    memset(&l, 0, sizeof l);
    for (uint32_t i = 0; i < n; i++) {
        if (!run[i])
            continue;
        for (uint32_t off = 0, ctr = 1; off < ops[i].len; off += 64, ctr++) {
            lane_set(&l, used, ctr, ops[i].nonce);
            where[used] = ops[i].text + off;
            bytes[used] = ops[i].len - off < 64 ? ops[i].len - off : 64;
            if (++used == LANES) {
                blocks(key, &l, ks, LANES, avx512);
                xor_lanes(where, bytes, ks, LANES, avx512);
                used = 0;
            }
        }
    }
    if (used > 0) {
        blocks(key, &l, ks, used, avx512);
        xor_lanes(where, bytes, ks, used, avx512);
    }
}

/*
 * Poly1305 (RFC 8439 §2.5) in base 2^64: the accumulator h = h2:h1:h0 (h2 a few bits),
 * r = r1:r0 clamped, s1 = r1 + r1/4, so that a product's part above 2^130 folds back
 * times 5 (2^130 = 5 mod p) without a division. The same arithmetic as OpenSSL's and
 * the RFC's reference implementations, no branches on the data.
 */
typedef unsigned __int128 u128;

struct poly {
    uint64_t r0, r1, s1, h0, h1, h2;
};

/* Absorbs one 16-byte block `m` (with the 2^128 bit: every block of the AEAD's
 * padded input is a whole one). */
static inline void poly_block(struct poly *p, const uint8_t m[16])
{
    u128 d0, d1;
    uint64_t c;

    p->h0 = (uint64_t)(d0 = (u128)p->h0 + le64(m));
    p->h1 = (uint64_t)(d1 = (u128)p->h1 + (uint64_t)(d0 >> 64) + le64(m + 8));
    p->h2 += (uint64_t)(d1 >> 64) + 1;

    d0 = (u128)p->h0 * p->r0 + (u128)p->h1 * p->s1;
    d1 = (u128)p->h0 * p->r1 + (u128)p->h1 * p->r0 + (u128)(p->h2 * p->s1);
    p->h2 = p->h2 * p->r0;

    p->h0 = (uint64_t)d0;
    d1 += d0 >> 64;
    p->h1 = (uint64_t)d1;
    p->h2 += (uint64_t)(d1 >> 64);
    /* Fold what is above 2^130 back, times 5 (a carry chain: add, adc, adc). */
    c = (p->h2 >> 2) + (p->h2 & ~(uint64_t)3);
    p->h2 &= 3;
    p->h0 = (uint64_t)(d0 = (u128)p->h0 + c);
    p->h1 = (uint64_t)(d1 = (u128)p->h1 + (uint64_t)(d0 >> 64));
    p->h2 += (uint64_t)(d1 >> 64);
}

/* Absorbs `len` bytes as whole blocks, the last one zero-padded. */
static inline void poly_padded(struct poly *p, const uint8_t *data, uint32_t len)
{
    uint32_t whole = len & ~15u;
    for (uint32_t off = 0; off < whole; off += 16)
        poly_block(p, data + off);
    if (len > whole) {
        uint8_t last[16] = { 0 };
        memcpy(last, data + whole, len - whole);
        poly_block(p, last);
    }
}

/* How many packets' Poly1305 run interleaved: each block is a chain of dependent
 * multiplications, so one packet alone leaves the multiplier idle most of the time. */
#define POLY_WAYS 2

/* Absorbs `blocks` whole blocks into each of POLY_WAYS accumulators, from each one's own
 * data: one loop body of independent chains, which the CPU overlaps. */
static inline void poly_blocks_ways(struct poly p[POLY_WAYS], const uint8_t *data[POLY_WAYS],
                                    uint32_t blocks)
{
    for (uint32_t b = 0; b < blocks; b++)
        for (int w = 0; w < POLY_WAYS; w++)
            poly_block(&p[w], data[w] + 16 * b);
}

/* Starts an accumulator with one-time key `otk`'s r. */
static inline void poly_init(struct poly *p, const uint8_t otk[32])
{
    memset(p, 0, sizeof *p);
    p->r0 = le64(otk) & 0x0ffffffc0fffffffULL;
    p->r1 = le64(otk + 8) & 0x0ffffffc0ffffffcULL;
    p->s1 = p->r1 + (p->r1 >> 2);
}

/* The tag from accumulator `p` and one-time key `otk`'s s. */
static void poly_finish(struct poly *p, const uint8_t otk[32], uint8_t tag[16])
{
    u128 t;
    uint64_t g0, g1, g2, mask;

    /* h mod p: h - p = h + 5 - 2^130; where that does not go negative, it is the
     * answer. */
    g0 = (uint64_t)(t = (u128)p->h0 + 5);
    g1 = (uint64_t)(t = (u128)p->h1 + (uint64_t)(t >> 64));
    g2 = p->h2 + (uint64_t)(t >> 64);
    mask = 0 - (g2 >> 2);
    p->h0 = (p->h0 & ~mask) | (g0 & mask);
    p->h1 = (p->h1 & ~mask) | (g1 & mask);
    /* tag = (h + s) mod 2^128 */
    p->h0 = (uint64_t)(t = (u128)p->h0 + le64(otk + 16));
    p->h1 = (uint64_t)((u128)p->h1 + (uint64_t)(t >> 64) + le64(otk + 24));
    put_le64(tag, p->h0);
    put_le64(tag + 8, p->h1);
    explicit_bzero(p, sizeof *p);
}

/* The lengths block that ends the AEAD's Poly1305 input. */
static inline void lengths_block(uint8_t out[16], uint32_t aad_len, uint32_t len)
{
    put_le64(out, aad_len);
    put_le64(out + 8, len);
}

/* The AEAD's tags (RFC 8439 §2.8) of `n` ops: Poly1305 with each one-time key over the
 * AAD and the ciphertext, each zero-padded to whole blocks, then both lengths. Groups of
 * POLY_WAYS ops run interleaved over the blocks they all have (the AAD's one block, the
 * text's whole blocks up to the shortest text's, the lengths); the rest of each text goes
 * alone. */
static void aead_tags(const uint8_t (*otk)[32], struct espgw_chacha_op *ops, uint32_t n)
{
    uint32_t i = 0;

    for (; i + POLY_WAYS <= n; i += POLY_WAYS) {
        struct poly p[POLY_WAYS];
        uint8_t pad[POLY_WAYS][16];
        const uint8_t *src[POLY_WAYS];
        uint32_t common = UINT32_MAX;
        int all_aad = 1;

        for (int w = 0; w < POLY_WAYS; w++) {
            const struct espgw_chacha_op *o = &ops[i + w];
            poly_init(&p[w], otk[i + w]);
            memset(pad[w], 0, 16);
            /* One block where the AAD fits one (ESP's 8 or 12 bytes); another length goes
             * the long way below. */
            all_aad &= o->aad_len > 0 && o->aad_len <= 16;
            memcpy(pad[w], o->aad, o->aad_len <= 16 ? o->aad_len : 0);
            src[w] = pad[w];
            if (o->len / 16 < common)
                common = o->len / 16;
        }
        if (all_aad)
            poly_blocks_ways(p, src, 1);
        else
            for (int w = 0; w < POLY_WAYS; w++)
                poly_padded(&p[w], ops[i + w].aad, ops[i + w].aad_len);
        for (int w = 0; w < POLY_WAYS; w++)
            src[w] = ops[i + w].text;
        poly_blocks_ways(p, src, common);
        for (int w = 0; w < POLY_WAYS; w++) {
            const struct espgw_chacha_op *o = &ops[i + w];
            poly_padded(&p[w], o->text + 16 * common, o->len - 16 * common);
            lengths_block(pad[w], o->aad_len, o->len);
            src[w] = pad[w];
        }
        poly_blocks_ways(p, src, 1);
        for (int w = 0; w < POLY_WAYS; w++)
            poly_finish(&p[w], otk[i + w], ops[i + w].tag);
    }
    for (; i < n; i++) {
        struct poly p;
        uint8_t lengths[16];
        const struct espgw_chacha_op *o = &ops[i];

        poly_init(&p, otk[i]);
        poly_padded(&p, o->aad, o->aad_len);
        poly_padded(&p, o->text, o->len);
        lengths_block(lengths, o->aad_len, o->len);
        poly_block(&p, lengths);
        poly_finish(&p, otk[i], o->tag);
    }
}

/*
 * Poly1305 of eight packets at once in AVX-512 IFMA (52-bit multiply-add), where the CPU
 * has it: one packet a 64-bit lane, its accumulator and r in radix 2^44 (limbs of 44, 44
 * and 42 bits), so that each product of limbs fits the 104 bits IFMA returns as two
 * 52-bit halves. The products at 2^132 fold back times 20 (2^130 = 5 mod p), through
 * s1 = 20 r1 and s2 = 20 r2. Each packet's whole input (the AAD's block, the text padded
 * to whole blocks, the lengths) is staged in one buffer first, so that a lane reads its
 * next block at a fixed stride; a lane whose input has ended keeps its accumulator
 * (masked). The 64-bit arithmetic above stays for CPUs without IFMA.
 */
#define TARGET_IFMA __attribute__((target("avx512f,avx512bw,avx512ifma")))
#define IFMA_LANES 8
#define M44 ((1ULL << 44) - 1)
#define M42 ((1ULL << 42) - 1)
/* A staged input: AAD block, text, lengths. */
#define STAGE_BYTES (16 + ESPGW_CHACHA_BATCH_TEXT_MAX + 16 + 16)

static const uint8_t zero_block[16];

/* Whether the CPU has AVX-512 IFMA, asked once (workers may ask at the same time: the
 * answer is the same, and the atomic access keeps that race defined). */
static int ifma_supported(void)
{
    static int cached = -1;
    int known = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx512ifma") ? 1 : 0;
        __atomic_store_n(&cached, known, __ATOMIC_RELAXED);
    }
    return known;
}

/* Stages op `o`'s Poly1305 input at `st`; returns its number of blocks. */
static uint32_t stage_input(const struct espgw_chacha_op *o, uint8_t *st)
{
    uint32_t at = 0;
    if (o->aad_len > 0) {
        memset(st, 0, 16);
        memcpy(st, o->aad, o->aad_len); /* at most 16 */
        at = 16;
    }
    uint32_t padded = (o->len + 15) & ~15u;
    memcpy(st + at, o->text, o->len);
    memset(st + at + o->len, 0, padded - o->len);
    at += padded;
    lengths_block(st + at, o->aad_len, o->len);
    return at / 16 + 1;
}

/* The eight lanes' block `b` as two vectors of 64-bit words: their low and high halves. */
TARGET_IFMA static inline void load_blocks(const uint8_t *const at[IFMA_LANES], __m512i *lo,
                                           __m512i *hi)
{
    __m512i a = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)at[0]));
    __m512i c = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)at[4]));
    a = _mm512_inserti32x4(a, _mm_loadu_si128((const __m128i *)at[1]), 1);
    c = _mm512_inserti32x4(c, _mm_loadu_si128((const __m128i *)at[5]), 1);
    a = _mm512_inserti32x4(a, _mm_loadu_si128((const __m128i *)at[2]), 2);
    c = _mm512_inserti32x4(c, _mm_loadu_si128((const __m128i *)at[6]), 2);
    a = _mm512_inserti32x4(a, _mm_loadu_si128((const __m128i *)at[3]), 3);
    c = _mm512_inserti32x4(c, _mm_loadu_si128((const __m128i *)at[7]), 3);
    const __m512i even = _mm512_set_epi64(14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_set_epi64(15, 13, 11, 9, 7, 5, 3, 1);
    *lo = _mm512_permutex2var_epi64(a, even, c);
    *hi = _mm512_permutex2var_epi64(a, odd, c);
}

/* Tags of up to eight ops (`n`), their inputs staged in `stage`. */
TARGET_IFMA static void aead_tags_ifma8(const uint8_t (*otk)[32], struct espgw_chacha_op *ops,
                                        uint32_t n, uint8_t (*stage)[STAGE_BYTES])
{
    uint64_t blocks[IFMA_LANES], r[3][IFMA_LANES];
    const uint8_t *base[IFMA_LANES];
    uint32_t most = 0;

    for (uint32_t w = 0; w < IFMA_LANES; w++) {
        if (w < n) {
            blocks[w] = stage_input(&ops[w], stage[w]);
            base[w] = stage[w];
            uint64_t r0 = le64(otk[w]) & 0x0ffffffc0fffffffULL;
            uint64_t r1 = le64(otk[w] + 8) & 0x0ffffffc0ffffffcULL;
            r[0][w] = r0 & M44;
            r[1][w] = ((r0 >> 44) | (r1 << 20)) & M44;
            r[2][w] = r1 >> 24;
        } else {
            blocks[w] = 0;
            base[w] = zero_block;
            r[0][w] = r[1][w] = r[2][w] = 0;
        }
        if (blocks[w] > most)
            most = (uint32_t)blocks[w];
    }
    const __m512i m44 = _mm512_set1_epi64((long long)M44);
    const __m512i m42 = _mm512_set1_epi64((long long)M42);
    const __m512i bit128 = _mm512_set1_epi64(1LL << 40);
    const __m512i r0 = _mm512_loadu_si512(r[0]), r1 = _mm512_loadu_si512(r[1]),
                  r2 = _mm512_loadu_si512(r[2]);
    const __m512i s1 = _mm512_add_epi64(_mm512_slli_epi64(r1, 4), _mm512_slli_epi64(r1, 2));
    const __m512i s2 = _mm512_add_epi64(_mm512_slli_epi64(r2, 4), _mm512_slli_epi64(r2, 2));
    const __m512i count = _mm512_loadu_si512(blocks);
    __m512i h0 = _mm512_setzero_si512(), h1 = h0, h2 = h0;

    for (uint32_t b = 0; b < most; b++) {
        const uint8_t *at[IFMA_LANES];
        __m512i lo, hi;
        __mmask8 live = _mm512_cmpgt_epu64_mask(count, _mm512_set1_epi64(b));
        for (int w = 0; w < IFMA_LANES; w++)
            at[w] = b < blocks[w] ? base[w] + 16 * b : zero_block;
        load_blocks(at, &lo, &hi);
        /* h += m, the block's 2^128 bit included. */
        __m512i a0 = _mm512_add_epi64(h0, _mm512_and_si512(lo, m44));
        __m512i a1 = _mm512_add_epi64(
            h1, _mm512_and_si512(_mm512_or_si512(_mm512_srli_epi64(lo, 44),
                                                 _mm512_slli_epi64(hi, 20)),
                                 m44));
        __m512i a2 = _mm512_add_epi64(h2, _mm512_or_si512(_mm512_srli_epi64(hi, 24), bit128));
        /* d = a * r: low and high 52-bit halves of each limb's sum of products. */
        __m512i z = _mm512_setzero_si512();
        __m512i d0l = _mm512_madd52lo_epu64(z, a0, r0), d0h = _mm512_madd52hi_epu64(z, a0, r0);
        __m512i d1l = _mm512_madd52lo_epu64(z, a0, r1), d1h = _mm512_madd52hi_epu64(z, a0, r1);
        __m512i d2l = _mm512_madd52lo_epu64(z, a0, r2), d2h = _mm512_madd52hi_epu64(z, a0, r2);
        d0l = _mm512_madd52lo_epu64(d0l, a1, s2);
        d0h = _mm512_madd52hi_epu64(d0h, a1, s2);
        d1l = _mm512_madd52lo_epu64(d1l, a1, r0);
        d1h = _mm512_madd52hi_epu64(d1h, a1, r0);
        d2l = _mm512_madd52lo_epu64(d2l, a1, r1);
        d2h = _mm512_madd52hi_epu64(d2h, a1, r1);
        d0l = _mm512_madd52lo_epu64(d0l, a2, s1);
        d0h = _mm512_madd52hi_epu64(d0h, a2, s1);
        d1l = _mm512_madd52lo_epu64(d1l, a2, s2);
        d1h = _mm512_madd52hi_epu64(d1h, a2, s2);
        d2l = _mm512_madd52lo_epu64(d2l, a2, r0);
        d2h = _mm512_madd52hi_epu64(d2h, a2, r0);
        /* Back to 44/44/42-bit limbs: d = lo + hi * 2^52, so the carry out of a 44-bit
         * limb is lo >> 44 plus hi << 8 (of the 42-bit one, lo >> 42 plus hi << 10),
         * and the carry out of the top folds into the bottom times 5. */
        __m512i c = _mm512_add_epi64(_mm512_srli_epi64(d0l, 44), _mm512_slli_epi64(d0h, 8));
        __m512i n0 = _mm512_and_si512(d0l, m44);
        d1l = _mm512_add_epi64(d1l, c);
        c = _mm512_add_epi64(_mm512_srli_epi64(d1l, 44), _mm512_slli_epi64(d1h, 8));
        __m512i n1 = _mm512_and_si512(d1l, m44);
        d2l = _mm512_add_epi64(d2l, c);
        c = _mm512_add_epi64(_mm512_srli_epi64(d2l, 42), _mm512_slli_epi64(d2h, 10));
        __m512i n2 = _mm512_and_si512(d2l, m42);
        n0 = _mm512_add_epi64(n0, _mm512_add_epi64(c, _mm512_slli_epi64(c, 2)));
        n1 = _mm512_add_epi64(n1, _mm512_srli_epi64(n0, 44));
        n0 = _mm512_and_si512(n0, m44);
        h0 = _mm512_mask_mov_epi64(h0, live, n0);
        h1 = _mm512_mask_mov_epi64(h1, live, n1);
        h2 = _mm512_mask_mov_epi64(h2, live, n2);
    }
    /* A full carry, then each lane's tag in 64-bit arithmetic. */
    uint64_t hw[3][IFMA_LANES];
    __m512i c = _mm512_srli_epi64(h1, 44);
    h1 = _mm512_and_si512(h1, m44);
    h2 = _mm512_add_epi64(h2, c);
    c = _mm512_srli_epi64(h2, 42);
    h2 = _mm512_and_si512(h2, m42);
    h0 = _mm512_add_epi64(h0, _mm512_add_epi64(c, _mm512_slli_epi64(c, 2)));
    c = _mm512_srli_epi64(h0, 44);
    h0 = _mm512_and_si512(h0, m44);
    h1 = _mm512_add_epi64(h1, c);
    /* Once more, so that h1 fits its 44 bits (it may have reached 2^44 just now): the
     * limbs are then put side by side without overlapping. */
    c = _mm512_srli_epi64(h1, 44);
    h1 = _mm512_and_si512(h1, m44);
    h2 = _mm512_add_epi64(h2, c);
    _mm512_storeu_si512(hw[0], h0);
    _mm512_storeu_si512(hw[1], h1);
    _mm512_storeu_si512(hw[2], h2);
    for (uint32_t w = 0; w < n; w++) {
        struct poly p = { 0 };
        p.h0 = hw[0][w] | (hw[1][w] << 44);
        p.h1 = (hw[1][w] >> 20) | (hw[2][w] << 24);
        p.h2 = hw[2][w] >> 40;
        poly_finish(&p, otk[w], ops[w].tag);
    }
    explicit_bzero(hw, sizeof hw);
    explicit_bzero(r, sizeof r);
}

uint32_t espgw_chacha_batch_text_max(void)
{
    /* IFMA's Poly1305 runs only beside AVX-512's ChaCha20 (espgw_chacha_batch_using). */
    int ifma = espgw_chacha_batch_isa() == ESPGW_CHACHA_ISA_AVX512 && ifma_supported();
    return ifma ? ESPGW_CHACHA_BATCH_TEXT_MAX : ESPGW_CHACHA_BATCH_SCALAR_TEXT_MAX;
}

/* The tags of `n` ops: eight at a time in IFMA where `ifma` says so, else in 64-bit
 * arithmetic (aead_tags). */
static void aead_tags_best(const uint8_t (*otk)[32], struct espgw_chacha_op *ops, uint32_t n,
                           int ifma)
{
    if (!ifma) {
        aead_tags(otk, ops, n);
        return;
    }
    static __thread uint8_t stage[IFMA_LANES][STAGE_BYTES] __attribute__((aligned(64)));
    for (uint32_t i = 0; i < n; i += IFMA_LANES) {
        uint32_t group = n - i < IFMA_LANES ? n - i : IFMA_LANES;
        int fits = 1;
        for (uint32_t w = 0; w < group; w++)
            fits &= ops[i + w].len <= ESPGW_CHACHA_BATCH_TEXT_MAX && ops[i + w].aad_len <= 16;
        /* The shim never passes more (chacha_batch_takes); should a caller, its group goes
         * the 64-bit way rather than past the staging buffer. */
        if (fits)
            aead_tags_ifma8(otk + i, ops + i, group, stage);
        else
            aead_tags(otk + i, ops + i, group);
    }
    /* `stage` holds only what goes on the wire (AAD, ciphertext, lengths): not wiped. */
}

/* 1 when the two 16-byte tags are equal: every byte compared, no early exit. */
static inline int32_t tags_equal(const uint8_t a[16], const uint8_t b[16])
{
    uint64_t d = (le64(a) ^ le64(b)) | (le64(a + 8) ^ le64(b + 8));
    return (int32_t)(((d | (0 - d)) >> 63) ^ 1);
}

/* Up to CHUNK ops: one-time keys, then (sealing) encryption and tags, or (opening) tags,
 * the comparison and decryption of the authentic texts. */
static void chunk(const uint32_t key[8], int encrypt, struct espgw_chacha_op *ops, uint32_t n,
                  int avx512, int ifma)
{
    uint8_t ks[LANES][64] __attribute__((aligned(64)));
    uint8_t otk[CHUNK][32];
    uint8_t run[CHUNK];
    struct lanes l;

    memset(&l, 0, sizeof l);
    for (uint32_t base = 0; base < n; base += LANES) {
        uint32_t m = n - base < LANES ? n - base : LANES;
        for (uint32_t j = 0; j < m; j++)
            lane_set(&l, j, 0, ops[base + j].nonce);
        blocks(key, &l, ks, m, avx512);
        for (uint32_t j = 0; j < m; j++)
            memcpy(otk[base + j], ks[j], 32);
    }
    if (encrypt) {
        memset(run, 1, n);
        crypt_texts(key, ops, run, n, ks, avx512);
        aead_tags_best((const uint8_t(*)[32])otk, ops, n, ifma);
    } else {
        aead_tags_best((const uint8_t(*)[32])otk, ops, n, ifma);
        for (uint32_t i = 0; i < n; i++) {
            ops[i].authentic = tags_equal(ops[i].tag, ops[i].icv);
            run[i] = (uint8_t)ops[i].authentic;
        }
        crypt_texts(key, ops, run, n, ks, avx512);
    }
    explicit_bzero(ks, sizeof ks);
    explicit_bzero(otk, sizeof otk);
}

void espgw_chacha_batch_using(const uint8_t *key, int encrypt, struct espgw_chacha_op *ops,
                              uint32_t n, int allow)
{
    uint32_t k[8];
    int avx512 = (allow & ESPGW_CHACHA_USE_AVX512) && espgw_chacha_batch_isa() == ESPGW_CHACHA_ISA_AVX512;
    int ifma = avx512 && (allow & ESPGW_CHACHA_USE_IFMA) && ifma_supported();

    for (int w = 0; w < 8; w++)
        k[w] = le32(key + 4 * w);
    for (uint32_t done = 0; done < n; done += CHUNK)
        chunk(k, encrypt, ops + done, n - done < CHUNK ? n - done : CHUNK, avx512, ifma);
    explicit_bzero(k, sizeof k);
}

void espgw_chacha_batch(const uint8_t *key, int encrypt, struct espgw_chacha_op *ops,
                        uint32_t n)
{
    espgw_chacha_batch_using(key, encrypt, ops, n, ESPGW_CHACHA_USE_AVX512 | ESPGW_CHACHA_USE_IFMA);
}
