/* A feasibility test for issue 14's 1420-byte target on the Zen 5 host: is there a faster
 * AES-GCM seal of one long text than intel-ipsec-mb 1.3's (aes_gcm_enc_128_vaes_avx512, which
 * espgw calls for texts past 128 bytes on AVX-512 CPUs: 86-89 ns of a 1420-byte frame's 163 ns
 * in the pipeline's profile)? Not espgw code: a prototype, AES-128 only, sealing only.
 *
 * The flat pass: 32 blocks (512 bytes) a step, eight independent 512-bit counter chains
 * through AES, the ciphertext XORed and stored; every block is
 * multiplied by its own final power of H (X_j * H^(m - j), powers up to H^132 kept per key,
 * Karatsuba: three VPCLMULQDQ a group of four blocks), so no block waits on the GHASH of the
 * ones before it, and one reduction at the end. The tail: whole 64-byte pieces, then one
 * byte-masked piece. GHASH's convention (byte-reflected blocks, the white paper's algorithm
 * 5) as in crates/crypto/csrc/gcm_batch.c, whose reduce4 and gfmul are copied here so that
 * this file builds alone. `seal_piped` is the same pass with each step's
 * GHASH issued between the next step's AES rounds.
 *
 *   gcc -O3 -march=native gcm512-long.c -o gcm512-long -lIPSec_MB
 *   taskset -c 1 ./gcm512-long [units | piped | hot | no-aes | no-ghash]
 *
 * Every run first compares both passes with the library on 2,000 random lengths of 1-2,080
 * bytes and AADs of 8 and 12 (ciphertext and 16-byte tag; the first nonce all ones, so that
 * the counter carries), then times the library and the pass alternately, 0.3 s each, over
 * 64 buffers of 2 KB, three rounds. `units`: VAESENC and VPCLMULQDQ throughput (eight
 * chains). `no-aes` / `no-ghash` leave one half out (wrong output; for the analysis).
 *
 * Zen 5 host, 2026-12-06, quiet, five runs (docs/bench-gcm512-2026-12-06-zen5.txt), ns a seal:
 *   library 28-32 / 38-42 / 61-67 / 75-88 / 75-85 at 256 / 512 / 1024 / 1400 / 1420 B;
 *   flat pass 1.07-1.29x / 1.27-1.37x / 1.00-1.29x / 1.02-1.19x / 1.02-1.12x the library
 *   (70-77 ns at 1420 B); piped no better (0.97-1.11x at 1420 B, two runs).
 *   Both spend about 22 ns a 512-byte step (from 512 to 1024 B: the library 22-26, the pass
 *   21-31): AES alone 10-11 ns a step (VAESENC zmm 0.13 ns each, two a cycle at the VM's
 *   4.0-4.1 GHz: 80 a step), GHASH alone 13-14 ns (VPCLMULQDQ zmm 0.48-0.50 ns each: 24 a
 *   step), and the two add up, interleaved by hand or not. So a 1420-byte seal takes about
 *   60 ns plus a fixed 7-8 on this CPU however it is written; espgw's 1420-byte packet could
 *   gain 10-20 ns of its 163: 1.25-1.35x ipsec-secgw, not 1.5x.
 */
#include <immintrin.h>
#include <intel-ipsec-mb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PMAX 132 /* H^132 .. H^1, then zero blocks (texts of up to 2,080 bytes flat) */
#define HDESC_LEN (PMAX + 4)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static inline __m512i reduce4(__m512i lo, __m512i mid, __m512i hi)
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

static __m128i gfmul(__m128i a, __m128i b)
{
    __m512i x = _mm512_broadcast_i32x4(a), y = _mm512_broadcast_i32x4(b);
    __m512i mid = _mm512_xor_si512(_mm512_clmulepi64_epi128(x, y, 0x01),
                                   _mm512_clmulepi64_epi128(x, y, 0x10));
    return _mm512_castsi512_si128(reduce4(_mm512_clmulepi64_epi128(x, y, 0x00), mid,
                                          _mm512_clmulepi64_epi128(x, y, 0x11)));
}

/* The four lanes of v summed into lane 0. */
static inline __m128i fold4(__m512i v)
{
    __m256i a = _mm256_xor_si256(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
    return _mm_xor_si128(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
}

struct key {
    __m512i k[11];
    uint8_t hdesc[16 * HDESC_LEN]; /* hdesc[i] = H^(PMAX - i), byte-reflected; zeros after */
    uint8_t hkar[16 * HDESC_LEN];  /* the same powers' two halves XORed (Karatsuba), low half */
};

static const uint8_t REFLECT[16] = {15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0};

static void key_setup(struct key *k, const struct gcm_key_data *kd)
{
    for (int r = 0; r <= 10; r++)
        k->k[r] = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(kd->expanded_keys + 16 * r)));
    __m128i b = _mm512_castsi512_si128(k->k[0]);
    for (int r = 1; r < 10; r++)
        b = _mm_aesenc_si128(b, _mm512_castsi512_si128(k->k[r]));
    b = _mm_aesenclast_si128(b, _mm512_castsi512_si128(k->k[10]));
    __m128i h = _mm_shuffle_epi8(b, _mm_loadu_si128((const __m128i *)REFLECT));
    memset(k->hdesc, 0, sizeof(k->hdesc));
    __m128i p = h;
    for (int e = 1; e <= PMAX; e++) {
        _mm_storeu_si128((__m128i *)(k->hdesc + 16 * (PMAX - e)), p);
        _mm_storeu_si128((__m128i *)(k->hkar + 16 * (PMAX - e)),
                         _mm_xor_si128(p, _mm_shuffle_epi32(p, 0x4e)));
        p = gfmul(p, h);
    }
}

/* x (four reflected blocks) times the four powers at h (and their Karatsuba halves at hk),
 * added to the unreduced sums; mid is Karatsuba's middle term before lo and hi come off. */
static inline void kmul(__m512i x, const uint8_t *h, const uint8_t *hk, __m512i *lo, __m512i *mid,
                        __m512i *hi)
{
    __m512i hg = _mm512_loadu_si512((const void *)h);
    __m512i kg = _mm512_loadu_si512((const void *)hk);
    *lo = _mm512_xor_si512(*lo, _mm512_clmulepi64_epi128(x, hg, 0x00));
    *hi = _mm512_xor_si512(*hi, _mm512_clmulepi64_epi128(x, hg, 0x11));
    *mid = _mm512_xor_si512(
        *mid, _mm512_clmulepi64_epi128(_mm512_xor_si512(x, _mm512_shuffle_epi32(x, 0x4e)), kg, 0x00));
}

/* AES of eight counter chains (32 blocks), in place: eight independent chains, enough to
 * cover the AES instruction's latency at two a cycle. */
static inline void aes8(const struct key *k, __m512i s[8])
{
#pragma GCC unroll 8
    for (int z = 0; z < 8; z++)
        s[z] = _mm512_xor_si512(s[z], k->k[0]);
#pragma GCC unroll 9
    for (int r = 1; r < 10; r++) {
#pragma GCC unroll 8
        for (int z = 0; z < 8; z++)
            s[z] = _mm512_aesenc_epi128(s[z], k->k[r]);
    }
#pragma GCC unroll 8
    for (int z = 0; z < 8; z++)
        s[z] = _mm512_aesenclast_epi128(s[z], k->k[10]);
}

/* The flat pass: every block times its own final power of H (X_j * H^(m - j)), so no block
 * waits on the GHASH state of the ones before it; one reduction at the end. Texts of up to
 * (PMAX - 2) * 16 bytes. */
/* Analysis switches (command line): the AES or the GHASH half left out. */
static int no_aes, no_ghash;

/* The flat pass (piped = 0), or the same with each step's GHASH issued between the next
 * step's AES rounds (piped = 1); a constant in each of the two callers below. */
static inline __attribute__((always_inline)) void seal_pass(const struct key *k, const uint8_t iv[12],
                                                            const uint8_t *aad, uint32_t aad_len,
                                                            uint8_t *p, uint64_t len,
                                                            uint8_t tag[16], int piped)
{
    const __m512i reflect = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)REFLECT));
    const __m512i ctr_bytes = _mm512_broadcast_i32x4(
        _mm_set_epi8(12, 13, 14, 15, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
    __m128i nonce = _mm_maskz_loadu_epi8(0x0fff, iv);
    __m512i ctr = _mm512_add_epi32(_mm512_broadcast_i32x4(nonce),
                                   _mm512_set_epi32(5, 0, 0, 0, 4, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0));
    const __m512i four = _mm512_set_epi32(4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0);
    uint32_t nb = (uint32_t)((len + 15) / 16);
    /* Text block i (1-based) goes with H^(nb + 2 - i): group g's first power H^(nb + 1 - 4g). */
    const uint8_t *h = k->hdesc + 16 * (PMAX - (nb + 1));
    const uint8_t *hk = k->hkar + 16 * (PMAX - (nb + 1));
    __m512i lo = _mm512_setzero_si512(), mid = lo, hi = lo;
    /* The AAD block with H^(nb + 2), the lengths block with H^1, in lane 0. */
    __m128i a = _mm_maskz_loadu_epi8((__mmask16)((1u << aad_len) - 1), aad);
    __m128i lens = _mm_set_epi64x((long long)aad_len * 8, (long long)len * 8);
    kmul(_mm512_castsi128_si512(_mm_shuffle_epi8(a, _mm512_castsi512_si128(reflect))),
         k->hdesc + 16 * (PMAX - (nb + 2)), k->hkar + 16 * (PMAX - (nb + 2)), &lo, &mid, &hi);
    kmul(_mm512_castsi128_si512(lens), k->hdesc + 16 * (PMAX - 1), k->hkar + 16 * (PMAX - 1), &lo,
         &mid, &hi);
    uint64_t off = 0;
    __m512i s[8];
    if (!piped) {
        for (; off + 512 <= len; off += 512, h += 512, hk += 512) {
#pragma GCC unroll 8
            for (int z = 0; z < 8; z++) {
                s[z] = _mm512_shuffle_epi8(ctr, ctr_bytes);
                ctr = _mm512_add_epi32(ctr, four);
            }
            if (!no_aes)
                aes8(k, s);
#pragma GCC unroll 8
            for (int z = 0; z < 8; z++) {
                __m512i c = _mm512_xor_si512(_mm512_loadu_si512((const void *)(p + off + 64 * z)), s[z]);
                _mm512_storeu_si512((void *)(p + off + 64 * z), c);
                if (!no_ghash)
                    kmul(_mm512_shuffle_epi8(c, reflect), h + 64 * z, hk + 64 * z, &lo, &mid, &hi);
            }
        }
    } else {
        /* Software-pipelined: step k's GHASH products are issued between step k + 1's AES
         * rounds (one group of four blocks after each of rounds 1-8), so that the two kinds of
         * instruction are interleaved in the stream, not left to the out-of-order window. */
        __m512i x[8];
        const uint8_t *hp = h, *hkp = hk;
        int pending = 0;
        for (; off + 512 <= len; off += 512, h += 512, hk += 512) {
#pragma GCC unroll 8
            for (int z = 0; z < 8; z++) {
                s[z] = _mm512_xor_si512(_mm512_shuffle_epi8(ctr, ctr_bytes), k->k[0]);
                ctr = _mm512_add_epi32(ctr, four);
            }
#pragma GCC unroll 9
            for (int r = 1; r < 10; r++) {
#pragma GCC unroll 8
                for (int z = 0; z < 8; z++)
                    s[z] = _mm512_aesenc_epi128(s[z], k->k[r]);
                if (pending && r <= 8)
                    kmul(x[r - 1], hp + 64 * (r - 1), hkp + 64 * (r - 1), &lo, &mid, &hi);
            }
#pragma GCC unroll 8
            for (int z = 0; z < 8; z++) {
                __m512i c = _mm512_xor_si512(_mm512_loadu_si512((const void *)(p + off + 64 * z)),
                                             _mm512_aesenclast_epi128(s[z], k->k[10]));
                _mm512_storeu_si512((void *)(p + off + 64 * z), c);
                x[z] = _mm512_shuffle_epi8(c, reflect);
            }
            pending = 1;
            hp = h;
            hkp = hk;
        }
        if (pending)
            for (int z = 0; z < 8; z++)
                kmul(x[z], hp + 64 * z, hkp + 64 * z, &lo, &mid, &hi);
    }
    uint64_t rest = len - off;
    if (rest) {
#pragma GCC unroll 8
        for (int z = 0; z < 8; z++) {
            s[z] = _mm512_shuffle_epi8(ctr, ctr_bytes);
            ctr = _mm512_add_epi32(ctr, four);
        }
        aes8(k, s);
        /* Whole 64-byte pieces with plain loads and stores, only the last partial one
         * byte-masked. */
        uint32_t whole = (uint32_t)(rest / 64);
        for (uint32_t z = 0; z < whole; z++) {
            __m512i c = _mm512_xor_si512(_mm512_loadu_si512((const void *)(p + off + 64 * z)), s[z]);
            _mm512_storeu_si512((void *)(p + off + 64 * z), c);
            kmul(_mm512_shuffle_epi8(c, reflect), h + 64 * z, hk + 64 * z, &lo, &mid, &hi);
        }
        uint64_t left = rest - 64 * whole;
        if (left) {
            uint8_t *at = p + off + 64 * whole;
            __mmask64 m = ((__mmask64)1 << left) - 1;
            __m512i c = _mm512_maskz_mov_epi8(m, _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, at),
                                                                  s[whole]));
            _mm512_mask_storeu_epi8(at, m, c);
            /* Lanes past the text are zero blocks: their powers (zero or not) add nothing. */
            kmul(_mm512_shuffle_epi8(c, reflect), h + 64 * whole, hk + 64 * whole, &lo, &mid, &hi);
        }
    }
    __m128i l = fold4(lo), hh = fold4(hi);
    __m128i mm = _mm_xor_si128(_mm_xor_si128(fold4(mid), l), hh);
    __m128i S = _mm512_castsi512_si128(reduce4(_mm512_castsi128_si512(l), _mm512_castsi128_si512(mm),
                                               _mm512_castsi128_si512(hh)));
    __m128i j0 = _mm_insert_epi32(nonce, 1 << 24, 3);
    __m128i e = _mm_xor_si128(j0, _mm512_castsi512_si128(k->k[0]));
    for (int r = 1; r < 10; r++)
        e = _mm_aesenc_si128(e, _mm512_castsi512_si128(k->k[r]));
    e = _mm_aesenclast_si128(e, _mm512_castsi512_si128(k->k[10]));
    _mm_storeu_si128((__m128i *)tag,
                     _mm_xor_si128(_mm_shuffle_epi8(S, _mm512_castsi512_si128(reflect)), e));
}


static void seal_flat(const struct key *k, const uint8_t iv[12], const uint8_t *aad, uint32_t aad_len,
                      uint8_t *p, uint64_t len, uint8_t tag[16])
{
    seal_pass(k, iv, aad, aad_len, p, len, tag, 0);
}

static void seal_piped(const struct key *k, const uint8_t iv[12], const uint8_t *aad,
                       uint32_t aad_len, uint8_t *p, uint64_t len, uint8_t tag[16])
{
    seal_pass(k, iv, aad, aad_len, p, len, tag, 1);
}

/* The two instructions' throughput on this core: eight independent chains of each, so that
 * latency is covered; ns an instruction (CPU time of this thread). */
static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void units(void)
{
    __m512i a[8], c[8], key = _mm512_set1_epi32(0x12345), x = _mm512_setzero_si512();
    for (int i = 0; i < 8; i++)
        a[i] = c[i] = _mm512_set1_epi32(i);
    const long n = 100000000;
    double t0 = cpu_now();
    for (long i = 0; i < n; i++) {
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            a[j] = _mm512_aesenc_epi128(a[j], key);
    }
    double t1 = cpu_now();
    for (long i = 0; i < n; i++) {
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            c[j] = _mm512_clmulepi64_epi128(c[j], key, 0x01);
    }
    double t2 = cpu_now();
    for (int i = 0; i < 8; i++)
        x = _mm512_xor_si512(x, _mm512_xor_si512(a[i], c[i]));
    printf("VAESENC zmm %.3f ns, VPCLMULQDQ zmm %.3f ns (each, 8 chains; %d)\n",
           (t1 - t0) / (n * 8.0) * 1e9, (t2 - t1) / (n * 8.0) * 1e9,
           _mm_cvtsi128_si32(_mm512_castsi512_si128(x)) & 1);
}

int main(int argc, char **argv)
{
    IMB_MGR *mgr = alloc_mb_mgr(0);
    init_mb_mgr_avx512(mgr);
    uint8_t keyb[16];
    for (int i = 0; i < 16; i++)
        keyb[i] = (uint8_t)(i * 7 + 1);
    struct gcm_key_data kd __attribute__((aligned(64)));
    IMB_AES128_GCM_PRE(mgr, keyb, &kd);
    static struct key k __attribute__((aligned(64)));
    key_setup(&k, &kd);
    struct gcm_context_data ctx;
    static uint8_t a[4096], b[4096];
    uint8_t iv[12], aad[12], t1[16], t2[16];
    srand(1);
    for (int trial = 0; trial < 2000; trial++) {
        uint64_t len = 1 + (uint64_t)(rand() % ((PMAX - 2) * 16));
        uint32_t aad_len = (rand() & 1) ? 12 : 8;
        for (uint64_t i = 0; i < len; i++)
            a[i] = b[i] = (uint8_t)rand();
        for (int i = 0; i < 12; i++) {
            iv[i] = (uint8_t)rand();
            aad[i] = (uint8_t)rand();
        }
        if (trial == 0) /* a counter that carries out of its low byte and word halves */
            memset(iv, 0xff, 12);
        IMB_AES128_GCM_ENC(mgr, &kd, &ctx, a, a, len, iv, aad, aad_len, t1, 16);
        static uint8_t c[4096];
        uint8_t t3[16];
        memcpy(c, b, len);
        seal_flat(&k, iv, aad, aad_len, b, len, t2);
        seal_piped(&k, iv, aad, aad_len, c, len, t3);
        if (memcmp(a, b, len) || memcmp(t1, t2, 16) || memcmp(a, c, len) || memcmp(t1, t3, 16)) {
            printf("MISMATCH at len %lu aad %u: text %d tag %d\n", (unsigned long)len, aad_len,
                   memcmp(a, b, len) != 0, memcmp(t1, t2, 16) != 0);
            return 1;
        }
    }
    printf("2000 random lengths 1-%d: ciphertext and tag equal to the library's\n", (PMAX - 2) * 16);
    /* argv[1]: "units" (the instructions' throughput), "hot" (one buffer, in L1), "no-aes" or
     * "no-ghash" (analysis only: wrong output) */
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "units") == 0) {
        units();
        return 0;
    }
    int hot = strcmp(mode, "hot") == 0;
    no_aes = strcmp(mode, "no-aes") == 0;
    no_ghash = strcmp(mode, "no-ghash") == 0;
    int piped = strcmp(mode, "piped") == 0;
    static uint8_t buf[64][2048];
    int sizes[] = {256, 512, 1024, 1400, 1420};
    for (int round = 0; round < 3; round++)
        for (unsigned si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
            uint64_t len = (uint64_t)sizes[si];
            double r[2];
            for (int which = 0; which < 2; which++) {
                long n = 0;
                double t0 = now(), t;
                do {
                    for (int i = 0; i < 64; i++) {
                        uint8_t *at = buf[hot ? 0 : i];
                        if (which == 0)
                            IMB_AES128_GCM_ENC(mgr, &kd, &ctx, at, at, len, iv, aad, 8, t1, 16);
                        else if (piped)
                            seal_piped(&k, iv, aad, 8, at, len, t1);
                        else
                            seal_flat(&k, iv, aad, 8, at, len, t1);
                    }
                    n += 64;
                    t = now();
                } while (t - t0 < 0.3);
                r[which] = (t - t0) / n * 1e9;
            }
            printf("round %d, %4lu B: library %6.1f ns, flat pass %6.1f ns (%.2fx)\n", round,
                   (unsigned long)len, r[0], r[1], r[0] / r[1]);
        }
    return 0;
}
