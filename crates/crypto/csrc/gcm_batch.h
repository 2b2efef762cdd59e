/*
 * What ipsec_mb_shim.c and gcm_batch.c share: the AEAD operation the Rust side lays out,
 * and the multi-buffer AES-GCM path for short packets (gcm_batch.c).
 */
#ifndef ESPGW_GCM_BATCH_H
#define ESPGW_GCM_BATCH_H

#include <intel-ipsec-mb.h>
#include <stdint.h>

/* One AEAD operation, in place. Mirrors `RawAeadOp` in src/ipsec_mb.rs. */
struct espgw_aead_op {
    uint8_t *text;          /* plaintext/ciphertext, processed in place */
    uint64_t len;
    uint8_t *tag;           /* where the computed tag is written */
    uint8_t iv[12];         /* the nonce: salt || explicit IV */
    uint8_t aad[12];
    uint32_t aad_len;
    uint32_t tag_len;
    int32_t status;         /* out: one of ESPGW_OP_* below; the caller sets PENDING */
};

/* An op's status. DONE: completed, its tag in op->tag for the caller to compare (the
 * library's paths). The batch kernel's opens say more, having compared the tag itself:
 * AUTHENTIC (tag equal, text decrypted) or FORGED (tag differs, text left as it came). */
#define ESPGW_OP_PENDING (-1)
#define ESPGW_OP_DONE 0
#define ESPGW_OP_AUTHENTIC 1
#define ESPGW_OP_FORGED 2
/* Mirrors `RawAeadOp` in src/ipsec_mb.rs, which asserts the same size. */
_Static_assert(sizeof(struct espgw_aead_op) == 64, "espgw_aead_op layout");

/* The longest text (bytes) of the four-packet groups; longer goes to the library, except on
 * the 256-bit kernel, which takes it one packet at a time (gcm_batch_avx2.c, gcm_long). */
#define ESPGW_GCM_BATCH_TEXT_MAX 128
/* The longest text of a kernel's short groups (four blocks); longer ones, up to
 * ESPGW_GCM_BATCH_TEXT_MAX, go in groups of their own with a second AES chain, so that a
 * short packet never pays for a long one's. */
#define ESPGW_GCM_BATCH_SHORT_TEXT_MAX 64
/* Bytes of a key's batch data (powers of its hash key: up to H^16 for the 256-bit kernel's
 * one-packet pass, then zero blocks, the kernel's id in the last byte). Mirrors
 * src/ipsec_mb.rs. */
#define ESPGW_GCM_BATCH_KEY_SIZE 384

/* Which batch kernel this CPU runs: ESPGW_GCM_BATCH_AVX512 (AVX-512 F/BW/VL, VAES,
 * VPCLMULQDQ: gcm_batch.c), ESPGW_GCM_BATCH_AVX2 (AVX2, VAES, VPCLMULQDQ without AVX-512:
 * gcm_batch_avx2.c), ESPGW_GCM_BATCH_AESNI (AVX2, AES-NI, PCLMULQDQ: gcm_batch_aesni.c), or
 * 0 (none: the library alone). */
#define ESPGW_GCM_BATCH_AVX512 1
#define ESPGW_GCM_BATCH_AVX2 2
/* A 128-bit kernel for AVX2 CPUs with AES-NI and PCLMULQDQ but no VAES (AMD Zen 1 and 2,
 * Intel Haswell to Cascade Lake): gcm_batch_aesni.c, two packets at a time, texts of up to
 * ESPGW_GCM_AESNI_TEXT_MAX bytes (longer ones are left for the library); no AES-GMAC pass. */
#define ESPGW_GCM_BATCH_AESNI 3
#define ESPGW_GCM_AESNI_TEXT_MAX 64
int espgw_gcm_batch_supported(void);
/* Whether this CPU runs `kernel` (one of the above): espgw_gcm_batch_supported gives the
 * widest; the tests run each one the CPU allows. */
int espgw_gcm_batch_runs(int kernel);
/* Writes the batch data of the key in `kd` (expanded by the library) to `out`
 * (ESPGW_GCM_BATCH_KEY_SIZE bytes: the powers of H, and in its last byte the kernel they
 * are for); returns 0, writing nothing, where the CPU lacks the instructions. */
int espgw_gcm_batch_key(const struct gcm_key_data *kd, uint32_t key_bytes, uint8_t *out);
/* As espgw_gcm_batch_key, for the kernel named (returns 0 where the CPU cannot run it). */
int espgw_gcm_batch_key_for(const struct gcm_key_data *kd, uint32_t key_bytes, uint8_t *out,
                            int kernel);
/* Seals or opens the ops of `ops` with at most ESPGW_GCM_BATCH_TEXT_MAX bytes of text (on
 * the 256-bit kernel, up to 16 MiB; on the 128-bit one, ESPGW_GCM_AESNI_TEXT_MAX), an AAD of at most 12 bytes and a tag of 1-16 bytes;
 * leaves the others untouched. A seal's
 * status becomes ESPGW_OP_DONE (its tag written after its text), an open's
 * ESPGW_OP_AUTHENTIC or ESPGW_OP_FORGED (no tag written anywhere). Returns how many it
 * ran. */
uint32_t espgw_gcm_batch(const uint8_t *batch_key, const struct gcm_key_data *kd,
                         uint32_t key_bytes, int encrypt, struct espgw_aead_op *ops, uint32_t n);

/* AES-GMAC tags (RFC 4543) of the ops of `ops` that a batch kernel takes (up to 16 MiB:
 * four at a time up to ESPGW_GCM_BATCH_TEXT_MAX bytes, longer ones one at a time): an
 * op's `text` and `len` are the bytes the tag covers (read, never written), `aad_len`
 * must be 0; the tag (`tag_len` bytes) goes to op->tag and the status to ESPGW_OP_DONE;
 * the others are left untouched. Only the 256-bit kernel has these passes: with batch
 * data for any other it runs nothing (the library's own AVX-512 GCM is the one measured
 * there). Returns how many it ran. */
uint32_t espgw_gmac_batch(const uint8_t *batch_key, const struct gcm_key_data *kd,
                          uint32_t key_bytes, struct espgw_aead_op *ops, uint32_t n);

/* Whether an op goes through a batch kernel (its text, AAD and tag lengths). */
static inline int espgw_gcm_batch_eligible(const struct espgw_aead_op *op)
{
    return op->len <= ESPGW_GCM_BATCH_TEXT_MAX && op->aad_len <= 12 && op->tag_len >= 1 &&
           op->tag_len <= 16;
}

/* gcm_batch_avx2.c's halves of espgw_gcm_batch_key, espgw_gcm_batch and
 * espgw_gmac_batch, which dispatch to them. */
void espgw_gcm_batch_key_avx2(const struct gcm_key_data *kd, uint32_t key_bytes, uint8_t *out);
uint32_t espgw_gcm_batch_avx2(const uint8_t *batch_key, const struct gcm_key_data *kd,
                              uint32_t key_bytes, int encrypt, struct espgw_aead_op *ops,
                              uint32_t n);
uint32_t espgw_gmac_batch_avx2(const uint8_t *batch_key, const struct gcm_key_data *kd,
                               uint32_t key_bytes, struct espgw_aead_op *ops, uint32_t n);
/* gcm_batch_aesni.c's halves of espgw_gcm_batch_key and espgw_gcm_batch. */
void espgw_gcm_batch_key_aesni(const struct gcm_key_data *kd, uint32_t key_bytes, uint8_t *out);
uint32_t espgw_gcm_batch_aesni(const uint8_t *batch_key, const struct gcm_key_data *kd,
                               uint32_t key_bytes, int encrypt, struct espgw_aead_op *ops,
                               uint32_t n);

/* One kernel's pass over up to four ops of one group: `rk` is the kernel's own round keys
 * (each kernel lays them out for its register width). */
typedef void (*espgw_gcm_four_fn)(const void *rk, const uint8_t *hdesc, int encrypt,
                                  struct espgw_aead_op *const *o, uint32_t n);
/* The eligible ops of `ops` four at a time through `run_short` (texts of at most
 * ESPGW_GCM_BATCH_SHORT_TEXT_MAX bytes) or `run_wide` (longer), in arrival order within
 * each group; returns how many ran. Both kernels' driver (gcm_batch.c). */
uint32_t espgw_gcm_batch_in_fours(const void *rk, const uint8_t *hdesc, int encrypt,
                                  struct espgw_aead_op *ops, uint32_t n,
                                  espgw_gcm_four_fn run_short, espgw_gcm_four_fn run_wide);

#endif
