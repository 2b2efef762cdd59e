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
 * Runs `n` GCM operations under one key and returns the number of jobs that did not
 * complete (0 on success). Tags are written to op->tag; the caller compares them for
 * decryption.
 *
 * The burst API takes the whole burst in one call: one job-queue reservation and one
 * submission instead of three library calls per packet. Every field was set from
 * lengths the Rust side checked, so the library's own validation pass is skipped.
 */
int espgw_gcm_burst(IMB_MGR *m, const struct gcm_key_data *kd, uint32_t key_bytes,
                    int encrypt, struct espgw_aead_op *ops, uint32_t n)
{
    IMB_JOB *jobs[IMB_MAX_BURST_SIZE];
    int failed = 0;
    uint32_t done = 0;

    while (done < n) {
        uint32_t want = n - done, got, completed;
        if (want > IMB_MAX_BURST_SIZE)
            want = IMB_MAX_BURST_SIZE;
        got = IMB_GET_NEXT_BURST(m, want, jobs);
        if (got < want) {
            /* Queue space is held by unfinished jobs: complete them first. */
            uint32_t f = IMB_FLUSH_BURST(m, IMB_MAX_BURST_SIZE, jobs);
            for (uint32_t i = 0; i < f; i++)
                finish(jobs[i]);
            got = IMB_GET_NEXT_BURST(m, want, jobs);
            if (got == 0)
                return failed + (int)(n - done);
        }
        for (uint32_t i = 0; i < got; i++)
            fill_gcm_job(jobs[i], kd, key_bytes, encrypt, &ops[done + i]);
        completed = IMB_SUBMIT_BURST_NOCHECK(m, got, jobs);
        for (uint32_t i = 0; i < completed; i++)
            finish(jobs[i]);
        if (completed < got) {
            uint32_t f = IMB_FLUSH_BURST(m, got - completed, jobs);
            for (uint32_t i = 0; i < f; i++)
                finish(jobs[i]);
        }
        done += got;
    }
    for (uint32_t i = 0; i < n; i++)
        if (ops[i].status != 0)
            failed++;
    return failed;
}

/*
 * The same operations through the direct API: one library call per packet and no job
 * structures to fill. Synchronous, so every op completes.
 */
int espgw_gcm_direct(IMB_MGR *m, const struct gcm_key_data *kd, uint32_t key_bytes,
                     int encrypt, struct espgw_aead_op *ops, uint32_t n)
{
    struct gcm_context_data ctx;

    for (uint32_t i = 0; i < n; i++) {
        struct espgw_aead_op *op = &ops[i];
        if (encrypt) {
            switch (key_bytes) {
            case 16: IMB_AES128_GCM_ENC(m, kd, &ctx, op->text, op->text, op->len, op->iv, op->aad, op->aad_len, op->tag, op->tag_len); break;
            case 24: IMB_AES192_GCM_ENC(m, kd, &ctx, op->text, op->text, op->len, op->iv, op->aad, op->aad_len, op->tag, op->tag_len); break;
            default: IMB_AES256_GCM_ENC(m, kd, &ctx, op->text, op->text, op->len, op->iv, op->aad, op->aad_len, op->tag, op->tag_len); break;
            }
        } else {
            switch (key_bytes) {
            case 16: IMB_AES128_GCM_DEC(m, kd, &ctx, op->text, op->text, op->len, op->iv, op->aad, op->aad_len, op->tag, op->tag_len); break;
            case 24: IMB_AES192_GCM_DEC(m, kd, &ctx, op->text, op->text, op->len, op->iv, op->aad, op->aad_len, op->tag, op->tag_len); break;
            default: IMB_AES256_GCM_DEC(m, kd, &ctx, op->text, op->text, op->len, op->iv, op->aad, op->aad_len, op->tag, op->tag_len); break;
            }
        }
        op->status = 0;
    }
    /* The context holds the last packet's keystream and GHASH state: not left on the
     * stack (explicit_bzero: the compiler may not drop a clear of a dead variable). */
    explicit_bzero(&ctx, sizeof(ctx));
    return 0;
}
