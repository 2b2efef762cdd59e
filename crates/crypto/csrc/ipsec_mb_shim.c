/*
 * A thin C shim over intel-ipsec-mb's job API.
 *
 * Why a shim: the job API is a set of macros that call function pointers inside
 * IMB_MGR and fill a large IMB_JOB struct whose layout changes between library
 * versions. Compiling this file against the installed header keeps Rust's FFI
 * surface to a handful of plain functions with stable, simple signatures.
 */
#include <intel-ipsec-mb.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>

/* One AEAD operation, in place. Mirrors `RawAeadOp` in src/ipsec_mb.rs. */
struct espgw_aead_op {
    uint8_t *text;          /* plaintext/ciphertext, processed in place */
    uint64_t len;
    const uint8_t *iv;      /* 12-byte nonce: salt || explicit IV */
    const uint8_t *aad;
    uint64_t aad_len;
    uint8_t *tag;           /* where the computed tag is written */
    uint64_t tag_len;
    int64_t status;         /* out: 0 when the job completed, -1 otherwise */
};

IMB_MGR *espgw_mb_new(void)
{
    IMB_MGR *m = alloc_mb_mgr(0);
    if (m == NULL)
        return NULL;
    init_mb_mgr_auto(m, NULL);
    if (imb_get_errno(m) != 0) {
        free_mb_mgr(m);
        return NULL;
    }
    return m;
}

void espgw_mb_free(IMB_MGR *m)
{
    if (m != NULL)
        free_mb_mgr(m);
}

/* Name of the code path the library selected for this CPU. */
const char *espgw_mb_arch(IMB_MGR *m)
{
    switch (m->used_arch) {
    case IMB_ARCH_SSE: return "sse";
    case IMB_ARCH_AVX: return "avx";
    case IMB_ARCH_AVX2: return "avx2";
    case IMB_ARCH_AVX512: return "avx512";
    default: return "unknown";
    }
}

size_t espgw_gcm_key_size(void)
{
    return sizeof(struct gcm_key_data);
}

int espgw_gcm_precompute(IMB_MGR *m, uint32_t key_bytes, const uint8_t *key,
                         struct gcm_key_data *kd)
{
    switch (key_bytes) {
    case 16: IMB_AES128_GCM_PRE(m, key, kd); break;
    case 24: IMB_AES192_GCM_PRE(m, key, kd); break;
    case 32: IMB_AES256_GCM_PRE(m, key, kd); break;
    default: return -1;
    }
    return imb_get_errno(m) == 0 ? 0 : -1;
}

static void fill_gcm_job(IMB_JOB *job, const struct gcm_key_data *kd, uint32_t key_bytes,
                         int encrypt, struct espgw_aead_op *op)
{
    job->cipher_mode = IMB_CIPHER_GCM;
    job->hash_alg = IMB_AUTH_AES_GMAC;
    job->cipher_direction = encrypt ? IMB_DIR_ENCRYPT : IMB_DIR_DECRYPT;
    job->chain_order = encrypt ? IMB_ORDER_CIPHER_HASH : IMB_ORDER_HASH_CIPHER;
    job->enc_keys = kd;
    job->dec_keys = kd;
    job->key_len_in_bytes = key_bytes;
    job->src = op->text;
    job->dst = op->text;
    job->cipher_start_src_offset_in_bytes = 0;
    job->msg_len_to_cipher_in_bytes = op->len;
    job->hash_start_src_offset_in_bytes = 0;
    job->msg_len_to_hash_in_bytes = op->len;
    job->iv = op->iv;
    job->iv_len_in_bytes = 12;
    job->u.GCM.aad = op->aad;
    job->u.GCM.aad_len_in_bytes = op->aad_len;
    job->auth_tag_output = op->tag;
    job->auth_tag_output_len_in_bytes = op->tag_len;
    job->user_data = op;
    op->status = -1;
}

static void finish(IMB_JOB *job)
{
    struct espgw_aead_op *op = job->user_data;
    op->status = job->status == IMB_STATUS_COMPLETED ? 0 : -1;
}

/*
 * Runs `n` GCM operations under one key through the job API and returns the
 * number of jobs that did not complete (0 on success). Tags are written to
 * op->tag; the caller compares them for decryption.
 */
int espgw_gcm_burst(IMB_MGR *m, const struct gcm_key_data *kd, uint32_t key_bytes,
                    int encrypt, struct espgw_aead_op *ops, uint32_t n)
{
    int failed = 0;
    uint32_t submitted = 0, completed = 0;
    IMB_JOB *job;

    for (uint32_t i = 0; i < n; i++) {
        job = IMB_GET_NEXT_JOB(m);
        fill_gcm_job(job, kd, key_bytes, encrypt, &ops[i]);
        job = IMB_SUBMIT_JOB(m);
        submitted++;
        while (job != NULL) {
            finish(job);
            if (job->status != IMB_STATUS_COMPLETED)
                failed++;
            completed++;
            job = IMB_GET_COMPLETED_JOB(m);
        }
    }
    while (completed < submitted && (job = IMB_FLUSH_JOB(m)) != NULL) {
        finish(job);
        if (job->status != IMB_STATUS_COMPLETED)
            failed++;
        completed++;
    }
    return failed + (int)(submitted - completed);
}
