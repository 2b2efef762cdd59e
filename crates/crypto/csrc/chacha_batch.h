/*
 * espgw's own ChaCha20-Poly1305 (RFC 8439 AEAD, ESP as RFC 7634) for short texts, many
 * packets at once (chacha_batch.c); called by ipsec_mb_shim.c ahead of the library.
 */
#ifndef ESPGW_CHACHA_BATCH_H
#define ESPGW_CHACHA_BATCH_H

#include <stdint.h>

/* The longest text (bytes) the kernel takes on any CPU (a standard MTU's): with AVX-512
 * IFMA its Poly1305 runs eight packets at once and the kernel is ahead of intel-ipsec-mb's
 * one-packet code up to there. Without IFMA (64-bit Poly1305) the library is ahead from
 * about 300 bytes, and the kernel takes up to ESPGW_CHACHA_BATCH_SCALAR_TEXT_MAX. Longer
 * texts go to the library (chacha_batch.c says how these were measured). */
#define ESPGW_CHACHA_BATCH_TEXT_MAX 1024
#define ESPGW_CHACHA_BATCH_SCALAR_TEXT_MAX 256

/* One packet, as the kernel reads it: the shim fills these from its own ops. */
struct espgw_chacha_op {
    uint8_t *text;         /* in place: plaintext when sealing, ciphertext when opening */
    uint32_t len;          /* at most espgw_chacha_batch_text_max() */
    uint32_t aad_len;      /* at most 16 */
    const uint8_t *nonce;  /* 12 bytes: salt || IV */
    const uint8_t *aad;
    const uint8_t *icv;    /* opening: the received 16-byte tag */
    uint8_t *tag;          /* out: the 16-byte tag computed (sealing: the ICV's room) */
    int32_t authentic;     /* out, opening: 1 when the tag matched and the text was
                              decrypted, 0 when it did not (the text left as it came) */
};

/* The widest ChaCha20 this CPU runs the kernel with: ESPGW_CHACHA_ISA_AVX512 (AVX-512 F
 * and BW: sixteen blocks a register), ESPGW_CHACHA_ISA_AVX2 (eight), or 0 (no kernel). */
#define ESPGW_CHACHA_ISA_AVX2 1
#define ESPGW_CHACHA_ISA_AVX512 2
int espgw_chacha_batch_isa(void);
/* The longest text the kernel takes on this CPU: ESPGW_CHACHA_BATCH_TEXT_MAX with AVX-512
 * IFMA, ESPGW_CHACHA_BATCH_SCALAR_TEXT_MAX without. */
uint32_t espgw_chacha_batch_text_max(void);

/* Seals (`encrypt`) or opens the `n` ops with the 32-byte `key`, on a CPU where
 * espgw_chacha_batch_isa() is nonzero (both entry points: the narrowest path is AVX2's).
 * Sealing encrypts each text and writes its tag; opening computes each tag over the
 * ciphertext, compares it with the received one in constant time and decrypts only the
 * authentic texts. */
void espgw_chacha_batch(const uint8_t *key, int encrypt, struct espgw_chacha_op *ops,
                        uint32_t n);
/* The same with only the instructions `allow` names, where the CPU has them too: the
 * tests hold the AVX2 ChaCha20 and the 64-bit Poly1305 of CPUs without AVX-512 or IFMA to
 * the same bytes on one with them (IFMA is used only with AVX-512). The caller keeps each
 * text within ESPGW_CHACHA_BATCH_TEXT_MAX. */
#define ESPGW_CHACHA_USE_IFMA 1
#define ESPGW_CHACHA_USE_AVX512 2
void espgw_chacha_batch_using(const uint8_t *key, int encrypt, struct espgw_chacha_op *ops,
                              uint32_t n, int allow);

#endif
