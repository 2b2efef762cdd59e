/*
 * A thin C shim over intel-ipsec-mb's job API.
 *
 * Why a shim: the job API is a set of macros that call function pointers inside
 * IMB_MGR and fill a large IMB_JOB struct whose layout changes between library
 * versions. Compiling this file against the installed header keeps Rust's FFI
 * surface to a handful of plain functions with stable, simple signatures.
 */
#define _GNU_SOURCE /* memfd_create, dladdr, RTLD_DEEPBIND */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <unistd.h>
#include <intel-ipsec-mb.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>

#include "chacha_batch.h"
#include "gcm_batch.h"

/*
 * This manager's own error status. imb_get_errno() is not that: where the manager's field
 * is zero it returns a process-wide variable that every thread's refused jobs and direct-API
 * calls set (intel-ipsec-mb 1.3), so one thread would read another's error as its own: a
 * worker's refused job failing a key set up at the same time on the control thread.
 */
static int own_errno(const IMB_MGR *m)
{
    return m->imb_errno;
}

IMB_MGR *espgw_mb_new(void)
{
    IMB_MGR *m = alloc_mb_mgr(0);
    if (m == NULL)
        return NULL;
    init_mb_mgr_auto(m, NULL);
    if (own_errno(m) != 0) {
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

/*
 * A manager from a private instance of the library: the library loaded once more, from an
 * in-memory copy of its file (a new inode, so the dynamic loader does not hand back the
 * instance already loaded), with RTLD_DEEPBIND so that the copy's calls into itself stay in
 * the copy. The manager's function pointers then run the copy's code, which writes the
 * copy's globals. Why: intel-ipsec-mb 1.3 writes its process-wide errno on every call, job
 * API and direct API alike, so workers sharing one instance write one cache line per packet
 * from every core.
 *
 * The copy's descriptor stays open while the instance is loaded: the loader also knows
 * objects by the name they were opened with ("/proc/self/fd/N"), and a number closed and
 * given to the next copy would hand that one the earlier instance.
 */
struct espgw_instance {
    void *handle;
    int fd;
};

void espgw_mb_free_instance(IMB_MGR *m, struct espgw_instance *inst);

IMB_MGR *espgw_mb_new_instance(struct espgw_instance **out)
{
    Dl_info di;
    struct stat st;
    char path[64];
    int src = -1;
    IMB_MGR *m = NULL;
    struct espgw_instance *inst = calloc(1, sizeof(*inst));

    *out = NULL;
#ifdef __SANITIZE_ADDRESS__
    /* AddressSanitizer's runtime refuses RTLD_DEEPBIND (it would end the process): under
     * it (scripts/asan-shims.sh) every thread shares the process's instance. */
    free(inst);
    return NULL;
#endif
    if (inst == NULL)
        return NULL;
    inst->fd = -1;
    if (!dladdr((void *)alloc_mb_mgr, &di) || di.dli_fname == NULL)
        goto fail;
    src = open(di.dli_fname, O_RDONLY | O_CLOEXEC);
    if (src < 0 || fstat(src, &st) != 0)
        goto fail;
    inst->fd = memfd_create("ipsec-mb-instance", MFD_CLOEXEC);
    if (inst->fd < 0)
        goto fail;
    for (off_t done = 0; done < st.st_size;) {
        ssize_t n = sendfile(inst->fd, src, NULL, (size_t)(st.st_size - done));
        if (n <= 0)
            goto fail;
        done += n;
    }
    close(src);
    src = -1;
    snprintf(path, sizeof(path), "/proc/self/fd/%d", inst->fd);
    inst->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (inst->handle == NULL)
        goto fail;
    IMB_MGR *(*alloc)(uint64_t) = (IMB_MGR * (*)(uint64_t)) dlsym(inst->handle, "alloc_mb_mgr");
    void (*init)(IMB_MGR *, IMB_ARCH *) =
        (void (*)(IMB_MGR *, IMB_ARCH *))dlsym(inst->handle, "init_mb_mgr_auto");
    if (alloc == NULL || init == NULL)
        goto fail;
    m = alloc(0);
    if (m == NULL)
        goto fail;
    init(m, NULL);
    if (own_errno(m) != 0)
        goto fail;
    *out = inst;
    return m;
fail:
    if (src >= 0)
        close(src);
    espgw_mb_free_instance(m, inst);
    return NULL;
}

/* Frees a manager of espgw_mb_new_instance (the same libc free() whichever instance
 * allocated it), then unloads its instance. Either may be NULL. */
void espgw_mb_free_instance(IMB_MGR *m, struct espgw_instance *inst)
{
    espgw_mb_free(m);
    if (inst == NULL)
        return;
    if (inst->handle != NULL)
        dlclose(inst->handle);
    if (inst->fd >= 0)
        close(inst->fd);
    free(inst);
}

/*
 * A second manager for HMAC-SHA-1 and HMAC-SHA-256 through the CPU's SHA extensions
 * ("SHA-NI"), which in intel-ipsec-mb 1.3 only the SSE manager uses; the AVX, AVX2 and
 * AVX-512 managers hash several packets at once in vector lanes instead. Which is faster
 * depends on the CPU: on a Zen 1 host (AVX2 manager, 128-bit vector units), HMAC-SHA-256
 * over 1,024 bytes ran about 4x, and HMAC-SHA-1 about 1.8x, as fast through SHA-NI
 * (docs/experiments/hmac-burst.c, bursts of 64 through IMB_SUBMIT_HASH_BURST); on an
 * AVX-512 host the 16-lane code was faster (0.63x for SHA-NI, HMAC-SHA-256). Hence
 * `policy`: ESPGW_SHA_AUTO makes one where the CPU has SHA-NI and `main` is not the AVX-512
 * manager, ESPGW_SHA_ON wherever the CPU has SHA-NI, ESPGW_SHA_OFF never.
 *
 * From the same library instance as `main` (`inst`, NULL for the process's shared one), so
 * that a worker's hashing writes only its own instance's globals. NULL where there is none
 * to make: the caller then hashes through `main`.
 */
enum { ESPGW_SHA_AUTO = 0, ESPGW_SHA_ON = 1, ESPGW_SHA_OFF = 2 };

IMB_MGR *espgw_mb_new_sha(const IMB_MGR *main, struct espgw_instance *inst, int policy)
{
    IMB_MGR *(*alloc)(uint64_t) = alloc_mb_mgr;
    void (*init)(IMB_MGR *) = init_mb_mgr_sse;
    void (*release)(IMB_MGR *) = free_mb_mgr;

    if (main == NULL || policy == ESPGW_SHA_OFF || !(main->features & IMB_FEATURE_SHANI) ||
        (policy == ESPGW_SHA_AUTO && main->used_arch == IMB_ARCH_AVX512))
        return NULL;
    if (inst != NULL) {
        alloc = (IMB_MGR * (*)(uint64_t)) dlsym(inst->handle, "alloc_mb_mgr");
        init = (void (*)(IMB_MGR *))dlsym(inst->handle, "init_mb_mgr_sse");
        release = (void (*)(IMB_MGR *))dlsym(inst->handle, "free_mb_mgr");
        if (alloc == NULL || init == NULL || release == NULL)
            return NULL;
    }
    IMB_MGR *m = alloc(0);
    if (m == NULL)
        return NULL;
    init(m);
    /* The SSE manager takes SHA-NI where the CPU has it; anything else is no gain. */
    if (own_errno(m) != 0 || !(m->features & IMB_FEATURE_SHANI)) {
        release(m);
        return NULL;
    }
    return m;
}

/* The object whose code this manager's AES-128-GCM runs: its file ("" if unknown) and,
 * through *base, its load address (0 if unknown). */
const char *espgw_mb_code_file(const IMB_MGR *m, uintptr_t *base)
{
    Dl_info di;
    *base = 0;
    if (m == NULL || m->gcm128_enc == NULL || !dladdr((void *)m->gcm128_enc, &di) ||
        di.dli_fname == NULL)
        return "";
    *base = (uintptr_t)di.dli_fbase;
    return di.dli_fname;
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
    /* The precomputation can only refuse NULL pointers (the caller passes none), and it
     * reports that only through the process-wide status (see own_errno), not checked. */
    return 0;
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
    op->status = ESPGW_OP_PENDING;
}

static void finish(IMB_JOB *job)
{
    struct espgw_aead_op *op = job->user_data;
    op->status = job->status == IMB_STATUS_COMPLETED ? ESPGW_OP_DONE : ESPGW_OP_PENDING;
}

/*
 * The library's own argument checks (is_job_invalid() in intel-ipsec-mb's mb_mgr_code.h),
 * restated for the modes this shim fills, so that a burst whose every job passes them can
 * go in unchecked. Run inside the library they cost more than the hashing of a short
 * packet: intel-ipsec-mb 1.3 copies two 376-byte tables of tag lengths onto the stack for
 * every job it checks (two memcpy calls; callgrind: about 200 instructions a job, 11-13 %
 * of an AES-XCBC-MAC packet of 64 bytes through the whole pipeline). Each test here is the
 * library's or stricter (every length at most MB_MAX_LEN16, the largest the library's
 * lanes count in 16 bits; only the tag lengths the library accepts for IPsec or FIPS). A
 * mode this function does not know (AES-GMAC's job, which the shim fills for no SA: GMAC
 * goes through the direct API below) answers 0, and its burst keeps the library's checks.
 */
#define ESPGW_MAX_LEN16 ((1 << 16) - 2)

static int aes_key_len_ok(uint64_t bytes)
{
    return bytes == 16 || bytes == 24 || bytes == 32;
}

static int cipher_checks_pass(const IMB_JOB *j)
{
    uint64_t len = j->msg_len_to_cipher_in_bytes;
    const void *key = j->cipher_direction == IMB_DIR_ENCRYPT ? j->enc_keys : j->dec_keys;

    switch (j->cipher_mode) {
    case IMB_CIPHER_NULL:
        return 1;
    case IMB_CIPHER_CBC:
        return j->src != NULL && j->dst != NULL && j->iv != NULL && key != NULL &&
               aes_key_len_ok(j->key_len_in_bytes) && len != 0 && (len & 15) == 0 &&
               len <= ESPGW_MAX_LEN16 && j->iv_len_in_bytes == 16;
    case IMB_CIPHER_CNTR:
        return j->src != NULL && j->dst != NULL && j->iv != NULL && j->enc_keys != NULL &&
               aes_key_len_ok(j->key_len_in_bytes) &&
               (j->iv_len_in_bytes == 16 || j->iv_len_in_bytes == 12) && len != 0 &&
               len <= ESPGW_MAX_LEN16;
    case IMB_CIPHER_CCM:
        return j->src != NULL && j->dst != NULL && j->iv != NULL && j->enc_keys != NULL &&
               (j->key_len_in_bytes == 16 || j->key_len_in_bytes == 32) &&
               j->iv_len_in_bytes >= 7 && j->iv_len_in_bytes <= 13 &&
               len <= ESPGW_MAX_LEN16 && j->hash_alg == IMB_AUTH_AES_CCM;
    case IMB_CIPHER_CHACHA20_POLY1305:
        /* RFC 7634: a 256-bit key and a 96-bit nonce (salt || IV). */
        return (len == 0 || (j->src != NULL && j->dst != NULL)) && j->iv != NULL &&
               j->enc_keys != NULL && j->key_len_in_bytes == 32 &&
               j->iv_len_in_bytes == 12 && len <= ESPGW_MAX_LEN16 &&
               j->hash_alg == IMB_AUTH_CHACHA20_POLY1305;
    default:
        return 0;
    }
}

/* The tag lengths the library accepts for an HMAC: IPsec's truncated one or the whole. */
static int hmac_tag_len_ok(IMB_HASH_ALG h, uint64_t tag)
{
    switch (h) {
    case IMB_AUTH_HMAC_SHA_1: return tag == 12 || tag == 20;
    case IMB_AUTH_HMAC_SHA_256: return tag == 16 || tag == 32;
    case IMB_AUTH_HMAC_SHA_384: return tag == 24 || tag == 48;
    case IMB_AUTH_HMAC_SHA_512: return tag == 32 || tag == 64;
    case IMB_AUTH_MD5: return tag == 12 || tag == 16;
    default: return 0;
    }
}

static int hash_checks_pass(const IMB_JOB *j)
{
    uint64_t len = j->msg_len_to_hash_in_bytes;
    uint64_t tag = j->auth_tag_output_len_in_bytes;

    switch (j->hash_alg) {
    case IMB_AUTH_NULL:
        return 1;
    case IMB_AUTH_HMAC_SHA_1:
    case IMB_AUTH_HMAC_SHA_256:
    case IMB_AUTH_HMAC_SHA_384:
    case IMB_AUTH_HMAC_SHA_512:
    case IMB_AUTH_MD5:
        return j->src != NULL && j->auth_tag_output != NULL &&
               hmac_tag_len_ok(j->hash_alg, tag) && len != 0 && len <= ESPGW_MAX_LEN16 &&
               j->u.HMAC._hashed_auth_key_xor_ipad != NULL &&
               j->u.HMAC._hashed_auth_key_xor_opad != NULL;
    case IMB_AUTH_AES_XCBC:
        return j->src != NULL && j->auth_tag_output != NULL && tag == 12 &&
               len <= ESPGW_MAX_LEN16 && j->u.XCBC._k1_expanded != NULL &&
               j->u.XCBC._k2 != NULL && j->u.XCBC._k3 != NULL;
    case IMB_AUTH_AES_CCM:
        /* One range for cipher and tag (RFC 4309), the AAD at most three blocks less the
         * two bytes of its length, an even tag of 4 to 16 bytes. */
        return j->src != NULL && j->auth_tag_output != NULL &&
               j->cipher_mode == IMB_CIPHER_CCM && len <= ESPGW_MAX_LEN16 &&
               len == j->msg_len_to_cipher_in_bytes &&
               j->hash_start_src_offset_in_bytes == j->cipher_start_src_offset_in_bytes &&
               j->u.CCM.aad_len_in_bytes <= 46 &&
               (j->u.CCM.aad_len_in_bytes == 0 || j->u.CCM.aad != NULL) && tag >= 4 &&
               tag <= 16 && (tag & 1) == 0;
    case IMB_AUTH_CHACHA20_POLY1305:
        /* The whole 16-byte Poly1305 tag (RFC 7634 §2), the AAD present when it has a
         * length. */
        return (len == 0 || (j->src != NULL && j->dst != NULL)) &&
               j->cipher_mode == IMB_CIPHER_CHACHA20_POLY1305 && len <= ESPGW_MAX_LEN16 &&
               (j->u.CHACHA20_POLY1305.aad_len_in_bytes == 0 ||
                j->u.CHACHA20_POLY1305.aad != NULL) &&
               j->auth_tag_output != NULL && tag == 16;
    default:
        return 0;
    }
}

/* Whether every one of `n` filled jobs passes the checks above. */
static int burst_checks_pass(IMB_JOB **jobs, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (!(jobs[i]->chain_order == IMB_ORDER_CIPHER_HASH ||
              jobs[i]->chain_order == IMB_ORDER_HASH_CIPHER) ||
            !cipher_checks_pass(jobs[i]) || !hash_checks_pass(jobs[i]))
            return 0;
    return 1;
}

/*
 * One burst driver for every kind of op: the burst API takes a burst in one call, one
 * job-queue reservation and one submission instead of two or three library calls per
 * packet. `fill(job, ctx, i)` fills the job of op `i` (its user_data pointing at the op)
 * and `finish(job)` records a job's outcome. With `refused` set, a burst whose jobs all
 * pass the checks above goes in unchecked; any other goes through the library's own
 * checks, which refuse a whole burst when one job fails them, submitting nothing (the
 * queue is left as it was); `refused(ctx, first, count)` then runs those ops some other
 * way (one at a time, where the bad job fails alone). Without it, bursts go unchecked.
 */
struct burst_kind {
    void (*fill)(IMB_JOB *job, void *ctx, uint32_t i);
    void (*finish)(IMB_JOB *job);
    void (*refused)(void *ctx, uint32_t first, uint32_t count);
};

/* Inlined into each caller, so that `k`'s functions are known there and inlined too
 * (called through the pointers, filling a job cost about 20 instructions more). */
static inline __attribute__((always_inline)) void
run_bursts(IMB_MGR *m, uint32_t n, const struct burst_kind *k, void *ctx)
{
    IMB_JOB *jobs[IMB_MAX_BURST_SIZE];
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
                k->finish(jobs[i]);
            got = IMB_GET_NEXT_BURST(m, want, jobs);
            if (got == 0)
                return; /* the ops left keep the failed status their caller set */
        }
        for (uint32_t i = 0; i < got; i++)
            k->fill(jobs[i], ctx, done + i);
        if (k->refused != NULL && !burst_checks_pass(jobs, got)) {
            m->imb_errno = 0; /* an earlier burst's refusal is not this one's */
            completed = IMB_SUBMIT_BURST(m, got, jobs);
            if (completed == 0 && own_errno(m) != 0) {
                k->refused(ctx, done, got);
                done += got;
                continue;
            }
        } else {
            completed = IMB_SUBMIT_BURST_NOCHECK(m, got, jobs);
        }
        for (uint32_t i = 0; i < completed; i++)
            k->finish(jobs[i]);
        if (completed < got) {
            uint32_t f = IMB_FLUSH_BURST(m, got - completed, jobs);
            for (uint32_t i = 0; i < f; i++)
                k->finish(jobs[i]);
        }
        done += got;
    }
}

struct gcm_burst {
    const struct gcm_key_data *kd;
    uint32_t key_bytes;
    int encrypt;
    struct espgw_aead_op *ops;
};

static void fill_gcm(IMB_JOB *job, void *ctx, uint32_t i)
{
    struct gcm_burst *b = ctx;
    fill_gcm_job(job, b->kd, b->key_bytes, b->encrypt, &b->ops[i]);
}

/*
 * Runs `n` GCM operations under one key through the job API and returns the number that
 * did not complete (0 on success). Tags are written to op->tag; the caller compares them
 * for decryption. Every field was set from lengths the Rust side checked, so the
 * library's own validation pass is skipped.
 */
int espgw_gcm_burst(IMB_MGR *m, const struct gcm_key_data *kd, uint32_t key_bytes,
                    int encrypt, struct espgw_aead_op *ops, uint32_t n)
{
    static const struct burst_kind kind = { fill_gcm, finish, NULL };
    struct gcm_burst b = { kd, key_bytes, encrypt, ops };
    int failed = 0;

    run_bursts(m, n, &kind, &b);
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
        if (op->status != ESPGW_OP_PENDING)
            continue; /* done already (by the batch path) */
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

/*
 * ESP transforms other than AES-GCM and AES-GMAC through the job API: AES-CBC, AES-CTR or
 * NULL with HMAC-SHA1/SHA-2/MD5 or AES-XCBC-MAC; AES-CCM; ChaCha20-Poly1305. The library
 * runs several jobs at once in parallel lanes (multi-buffer), so a burst goes in together.
 * (The GMAC hash ids remain for completeness; AES-GMAC itself goes through
 * espgw_gmac_direct below.)
 *
 * The Rust side (src/ipsec_mb_esp.rs) lays out every operation; this file only copies
 * those fields into the library's job structure, whose layout belongs to the installed
 * header.
 */
enum espgw_mb_cipher { ESPGW_C_NULL = 0, ESPGW_C_CBC, ESPGW_C_CTR, ESPGW_C_CCM, ESPGW_C_CHACHA };
enum espgw_mb_hash {
    ESPGW_H_NULL = 0, ESPGW_H_SHA1, ESPGW_H_SHA256, ESPGW_H_SHA384, ESPGW_H_SHA512,
    ESPGW_H_MD5, ESPGW_H_XCBC, ESPGW_H_CCM, ESPGW_H_CHACHA,
    ESPGW_H_GMAC128, ESPGW_H_GMAC192, ESPGW_H_GMAC256
};
/* What one call does to every op. */
enum espgw_mb_what {
    ESPGW_SEAL = 0,     /* encrypt, then the ICV (CCM: the library's own order) */
    ESPGW_HASH_ONLY,    /* the ICV alone (opening encrypt-then-MAC: verify first) */
    ESPGW_DECRYPT_ONLY, /* decryption alone (after the ICV was found good) */
    ESPGW_OPEN_AEAD,    /* combined mode: decrypt and compute the tag */
    ESPGW_ENCRYPT_ONLY  /* encryption alone: the first half of sealing encrypt-then-MAC,
                           and AES-192-CBC for the CBC-MAC of AES-192-CCM (ipsec_mb_ccm.rs) */
};

/* One SA's prepared keys. Mirrors `RawSa` in src/ipsec_mb_esp.rs. */
struct espgw_mb_sa {
    int32_t cipher;
    int32_t hash;
    uint64_t key_bytes;
    const void *enc_keys;
    const void *dec_keys;
    const void *ipad;     /* HMAC: hash state after key ^ ipad */
    const void *opad;
    const void *k1;       /* AES-XCBC-MAC: expanded K1, K2, K3 */
    const void *k2;
    const void *k3;
    const void *gcm_key;  /* AES-GMAC: the precomputed struct gcm_key_data */
    uint64_t tag_len;     /* bytes of tag the library writes */
    uint64_t chacha_batch; /* ChaCha20-Poly1305: short texts through chacha_batch.c */
};

/* One packet. Mirrors `RawOp` in src/ipsec_mb_esp.rs. */
struct espgw_mb_op {
    uint8_t *buf;           /* start of the ESP packet (SPI) */
    uint64_t cipher_off;
    uint64_t cipher_len;
    uint64_t hash_off;
    uint64_t hash_len;
    uint8_t iv[16];         /* the cipher's IV or nonce as the library takes it */
    uint64_t iv_len;
    uint8_t aad[16];        /* CCM / ChaCha20-Poly1305 */
    uint64_t aad_len;
    uint8_t tag[64];        /* out: the computed tag */
    uint8_t expect[32];     /* the received ICV (used by the Rust side only) */
    int64_t status;         /* out: 0 when the job completed */
    uint8_t *tag_out;       /* where the tag goes: the packet's ICV room when sealing,
                               NULL for tag[] */
};
_Static_assert(sizeof(struct espgw_mb_op) == 200, "espgw_mb_op layout");

static IMB_CIPHER_MODE mb_cipher(int32_t c)
{
    switch (c) {
    case ESPGW_C_CBC: return IMB_CIPHER_CBC;
    case ESPGW_C_CTR: return IMB_CIPHER_CNTR;
    case ESPGW_C_CCM: return IMB_CIPHER_CCM;
    case ESPGW_C_CHACHA: return IMB_CIPHER_CHACHA20_POLY1305;
    default: return IMB_CIPHER_NULL;
    }
}

static IMB_HASH_ALG mb_hash(int32_t h)
{
    switch (h) {
    case ESPGW_H_SHA1: return IMB_AUTH_HMAC_SHA_1;
    case ESPGW_H_SHA256: return IMB_AUTH_HMAC_SHA_256;
    case ESPGW_H_SHA384: return IMB_AUTH_HMAC_SHA_384;
    case ESPGW_H_SHA512: return IMB_AUTH_HMAC_SHA_512;
    case ESPGW_H_MD5: return IMB_AUTH_MD5;
    case ESPGW_H_XCBC: return IMB_AUTH_AES_XCBC;
    case ESPGW_H_CCM: return IMB_AUTH_AES_CCM;
    case ESPGW_H_CHACHA: return IMB_AUTH_CHACHA20_POLY1305;
    case ESPGW_H_GMAC128: return IMB_AUTH_AES_GMAC_128;
    case ESPGW_H_GMAC192: return IMB_AUTH_AES_GMAC_192;
    case ESPGW_H_GMAC256: return IMB_AUTH_AES_GMAC_256;
    default: return IMB_AUTH_NULL;
    }
}

static void fill_esp_job(IMB_JOB *job, const struct espgw_mb_sa *sa, int what,
                         struct espgw_mb_op *op)
{
    int encrypt = what == ESPGW_SEAL || what == ESPGW_ENCRYPT_ONLY;
    int ccm = sa->cipher == ESPGW_C_CCM;
    int cipher_only = what == ESPGW_DECRYPT_ONLY || what == ESPGW_ENCRYPT_ONLY;

    job->cipher_mode = what == ESPGW_HASH_ONLY ? IMB_CIPHER_NULL : mb_cipher(sa->cipher);
    job->hash_alg = cipher_only ? IMB_AUTH_NULL : mb_hash(sa->hash);
    job->cipher_direction = encrypt ? IMB_DIR_ENCRYPT : IMB_DIR_DECRYPT;
    /* CCM authenticates the plaintext: its tag comes first when sealing. */
    if (encrypt)
        job->chain_order = ccm ? IMB_ORDER_HASH_CIPHER : IMB_ORDER_CIPHER_HASH;
    else
        job->chain_order = ccm ? IMB_ORDER_CIPHER_HASH : IMB_ORDER_HASH_CIPHER;
    job->enc_keys = sa->enc_keys;
    job->dec_keys = sa->dec_keys;
    job->key_len_in_bytes = job->cipher_mode == IMB_CIPHER_NULL ? 0 : sa->key_bytes;
    job->src = op->buf;
    /* dst is where the cipher's output starts (the offset already applied). */
    job->dst = op->buf + op->cipher_off;
    job->cipher_start_src_offset_in_bytes = op->cipher_off;
    job->msg_len_to_cipher_in_bytes = job->cipher_mode == IMB_CIPHER_NULL ? 0 : op->cipher_len;
    job->hash_start_src_offset_in_bytes = op->hash_off;
    job->msg_len_to_hash_in_bytes = op->hash_len;
    job->iv = op->iv;
    job->iv_len_in_bytes = op->iv_len;
    job->auth_tag_output = op->tag_out != NULL ? op->tag_out : op->tag;
    job->auth_tag_output_len_in_bytes = sa->tag_len;
    switch (job->hash_alg) {
    case IMB_AUTH_HMAC_SHA_1:
    case IMB_AUTH_HMAC_SHA_256:
    case IMB_AUTH_HMAC_SHA_384:
    case IMB_AUTH_HMAC_SHA_512:
    case IMB_AUTH_MD5:
        job->u.HMAC._hashed_auth_key_xor_ipad = sa->ipad;
        job->u.HMAC._hashed_auth_key_xor_opad = sa->opad;
        break;
    case IMB_AUTH_AES_XCBC:
        job->u.XCBC._k1_expanded = sa->k1;
        job->u.XCBC._k2 = sa->k2;
        job->u.XCBC._k3 = sa->k3;
        break;
    case IMB_AUTH_AES_CCM:
        job->u.CCM.aad = op->aad;
        job->u.CCM.aad_len_in_bytes = op->aad_len;
        break;
    case IMB_AUTH_CHACHA20_POLY1305:
        job->u.CHACHA20_POLY1305.aad = op->aad;
        job->u.CHACHA20_POLY1305.aad_len_in_bytes = op->aad_len;
        break;
    case IMB_AUTH_AES_GMAC_128:
    case IMB_AUTH_AES_GMAC_192:
    case IMB_AUTH_AES_GMAC_256:
        /* RFC 4543: GHASH over the hashed range, nonce = salt || IV. */
        job->u.GMAC._key = sa->gcm_key;
        job->u.GMAC._iv = op->iv;
        job->u.GMAC.iv_len_in_bytes = op->iv_len;
        break;
    default:
        break;
    }
    job->user_data = op;
    op->status = -1;
}

static void finish_esp(IMB_JOB *job)
{
    struct espgw_mb_op *op = job->user_data;
    op->status = job->status == IMB_STATUS_COMPLETED ? 0 : -1;
}

/*
 * Runs `what` on `n` ops of one SA one job at a time: each job is submitted as soon as it
 * is filled (the library starts a lane group when enough jobs of one algorithm are queued)
 * and whatever remains is flushed at the end. The library checks each job as it takes it,
 * so a job with a bad length fails alone.
 */
static void mb_esp_one_by_one(IMB_MGR *m, const struct espgw_mb_sa *sa, int what,
                              struct espgw_mb_op *ops, uint32_t n)
{
    IMB_JOB *job;

    for (uint32_t i = 0; i < n; i++) {
        job = IMB_GET_NEXT_JOB(m);
        fill_esp_job(job, sa, what, &ops[i]);
        job = IMB_SUBMIT_JOB(m);
        while (job != NULL) {
            finish_esp(job);
            job = IMB_GET_COMPLETED_JOB(m);
        }
    }
    while ((job = IMB_FLUSH_JOB(m)) != NULL)
        finish_esp(job);
}

struct esp_burst {
    IMB_MGR *m;
    const struct espgw_mb_sa *sa;
    int what;
    struct espgw_mb_op *ops;
};

static void fill_esp(IMB_JOB *job, void *ctx, uint32_t i)
{
    struct esp_burst *b = ctx;
    fill_esp_job(job, b->sa, b->what, &b->ops[i]);
}

static void esp_refused(void *ctx, uint32_t first, uint32_t count)
{
    struct esp_burst *b = ctx;
    mb_esp_one_by_one(b->m, b->sa, b->what, &b->ops[first], count);
}

/* Jobs per synchronous call (below): one thread's array, reused by every call. */
#define SYNC_CHUNK 64
static __thread IMB_JOB sync_jobs[SYNC_CHUNK];

static IMB_KEY_SIZE_BYTES mb_key_size(uint64_t key_bytes)
{
    switch (key_bytes) {
    case 16: return IMB_KEY_128_BYTES;
    case 24: return IMB_KEY_192_BYTES;
    default: return IMB_KEY_256_BYTES;
    }
}

static int is_hmac_sha(IMB_HASH_ALG h)
{
    return h == IMB_AUTH_HMAC_SHA_1 || h == IMB_AUTH_HMAC_SHA_256 ||
           h == IMB_AUTH_HMAC_SHA_384 || h == IMB_AUTH_HMAC_SHA_512;
}

/* Whether `hash` goes through `sha`, the SHA extensions' manager (espgw_mb_new_sha): the
 * two HMACs SHA-NI has instructions for, where there is one. Its hash state is the one the
 * HMAC pads were precomputed into (by `m`: the same SHA state words either way). */
static int uses_sha_ni(const IMB_MGR *sha, IMB_HASH_ALG hash)
{
    return sha != NULL && (hash == IMB_AUTH_HMAC_SHA_1 || hash == IMB_AUTH_HMAC_SHA_256);
}

/* Fills the chunk's jobs for `what` and runs them through the synchronous call that
 * `what` needs; returns whether the library ran them (it checks every job first and,
 * when one fails its checks, runs none and leaves every buffer as it was). */
static int sync_pass(IMB_MGR *m, IMB_MGR *sha, const struct espgw_mb_sa *sa, int what,
                     struct espgw_mb_op *ops, uint32_t count)
{
    uint32_t ran;
    IMB_HASH_ALG hash = mb_hash(sa->hash);

    for (uint32_t i = 0; i < count; i++)
        fill_esp_job(&sync_jobs[i], sa, what, &ops[i]);
    if (what == ESPGW_HASH_ONLY)
        ran = IMB_SUBMIT_HASH_BURST(uses_sha_ni(sha, hash) ? sha : m, sync_jobs, count, hash);
    else
        ran = IMB_SUBMIT_CIPHER_BURST(m, sync_jobs, count, mb_cipher(sa->cipher),
                                      what == ESPGW_ENCRYPT_ONLY ? IMB_DIR_ENCRYPT
                                                                 : IMB_DIR_DECRYPT,
                                      mb_key_size(sa->key_bytes));
    return ran == count;
}

/*
 * Encrypt-then-MAC through the library's synchronous burst calls where it has them:
 * AES-CBC or AES-CTR alone (IMB_SUBMIT_CIPHER_BURST), HMAC-SHA1/SHA-2 alone
 * (IMB_SUBMIT_HASH_BURST). These take an array of jobs the caller owns and run it to
 * completion: no job queue to reserve, submit to and flush (callgrind, 64 bytes: 260-560
 * fewer instructions per packet opening). Sealing is then two passes, the cipher's and
 * the ICV's; opening stays two passes, the ICV's first (authenticate before decrypting).
 * Returns 0 when `what` and the SA's algorithms have no such calls (the caller then goes
 * through the job queue), 1 when every op ran. A chunk the library refuses goes one job
 * at a time, where the bad job fails alone: sealing, a refused cipher pass runs whole
 * sealing jobs, and a refused ICV pass (the text is already encrypted) ICV-only jobs.
 */
static int mb_esp_sync(IMB_MGR *m, IMB_MGR *sha, const struct espgw_mb_sa *sa, int what,
                       struct espgw_mb_op *ops, uint32_t n)
{
    IMB_CIPHER_MODE cipher = mb_cipher(sa->cipher);
    int aes = cipher == IMB_CIPHER_CBC || cipher == IMB_CIPHER_CNTR;
    int hmac_sha = is_hmac_sha(mb_hash(sa->hash));
    int seal = what == ESPGW_SEAL && hmac_sha && (aes || cipher == IMB_CIPHER_NULL);

    int cipher_only = (what == ESPGW_DECRYPT_ONLY || what == ESPGW_ENCRYPT_ONLY) && aes;

    if (!seal && !cipher_only && !(what == ESPGW_HASH_ONLY && hmac_sha))
        return 0;
    for (uint32_t done = 0; done < n;) {
        uint32_t count = n - done < SYNC_CHUNK ? n - done : SYNC_CHUNK;
        struct espgw_mb_op *chunk = &ops[done];
        done += count;
        if (seal && aes && !sync_pass(m, sha, sa, ESPGW_ENCRYPT_ONLY, chunk, count)) {
            mb_esp_one_by_one(m, sa, ESPGW_SEAL, chunk, count);
            continue;
        }
        int pass = seal ? ESPGW_HASH_ONLY : what;
        if (!sync_pass(m, sha, sa, pass, chunk, count)) {
            mb_esp_one_by_one(m, sa, pass, chunk, count);
            continue;
        }
        for (uint32_t i = 0; i < count; i++)
            finish_esp(&sync_jobs[i]);
    }
    return 1;
}

/*
 * Runs `what` on `n` ops of one SA, so that every op has completed or failed on return;
 * returns the number of ops that did not complete.
 *
 * Through the burst API (callgrind: 33-101 fewer instructions per packet at 64 bytes
 * than two calls per packet). The library's argument checks stay on: they cost little
 * next to the work and turn a length the Rust side got wrong into a failed op, not a wild
 * access. A burst the library refuses for one such job goes one job at a time, where the
 * bad job fails alone.
 */
static void mb_esp_library(IMB_MGR *m, IMB_MGR *sha, const struct espgw_mb_sa *sa, int what,
                           struct espgw_mb_op *ops, uint32_t n)
{
    static const struct burst_kind kind = { fill_esp, finish_esp, esp_refused };
    struct esp_burst b = { m, sa, what, ops };

    if (!mb_esp_sync(m, sha, sa, what, ops, n))
        run_bursts(m, n, &kind, &b);
}

/* Whether the ChaCha20-Poly1305 kernel takes op `op` (laid out by the Rust side for a
 * combined mode: nonce, AAD, the text both ciphered and authenticated, a 16-byte tag). */
static int chacha_batch_takes(const struct espgw_mb_sa *sa, const struct espgw_mb_op *op,
                              uint32_t text_max)
{
    return op->buf != NULL && op->iv_len == 12 && op->aad_len <= 16 &&
           op->cipher_len <= text_max && op->hash_off == op->cipher_off &&
           op->hash_len == op->cipher_len && sa->tag_len == 16;
}

/* Ops per call of the kernel, and the library's share of a mixed burst: one thread's
 * arrays, reused by every call. */
#define CHACHA_CHUNK 64
static __thread struct espgw_chacha_op chacha_ops[CHACHA_CHUNK];
static __thread struct espgw_mb_op chacha_rest[CHACHA_CHUNK];

/*
 * ChaCha20-Poly1305 with espgw's kernel for texts up to espgw_chacha_batch_text_max()
 * (csrc/chacha_batch.c: 2.8x the library's one-packet code at 48 bytes of text, 1.2x at
 * 1,024) and the library for longer ones, `chunk` ops (at most CHACHA_CHUNK) at a time.
 * (Where the kernel runs in AVX2 the Rust side sends the longer ones to aws-lc-rs by
 * default and never passes them here: src/ipsec_mb_esp.rs, `ChaChaLongTexts`.)
 * The kernel's ops complete with their tag where the library would write it (sealing: the
 * packet's ICV room or op->tag; opening: op->tag, compared by the Rust side as the
 * library's is); opening, the kernel decrypts only a text whose tag matched, and a forged
 * one stays ciphertext for the Rust side to wipe. The library's ops of a mixed chunk run
 * from a copy (their jobs all complete within the call), in the order they came.
 */
static void chacha_chunk(IMB_MGR *m, const struct espgw_mb_sa *sa, int what,
                         struct espgw_mb_op *ops, uint32_t chunk)
{
    uint8_t rest_at[CHACHA_CHUNK];
    uint32_t taken = 0, rest = 0;
    /* Asked once a chunk, not once a packet (a call into another file). */
    uint32_t text_max = espgw_chacha_batch_text_max();

    for (uint32_t i = 0; i < chunk; i++) {
        struct espgw_mb_op *op = &ops[i];
        if (!chacha_batch_takes(sa, op, text_max)) {
            rest_at[rest++] = (uint8_t)i;
            continue;
        }
        uint8_t *text = op->buf + op->cipher_off;
        chacha_ops[taken++] = (struct espgw_chacha_op){
            .text = text,
            .len = (uint32_t)op->cipher_len,
            .aad_len = (uint32_t)op->aad_len,
            .nonce = op->iv,
            .aad = op->aad,
            .icv = text + op->cipher_len,
            .tag = what == ESPGW_SEAL && op->tag_out != NULL ? op->tag_out : op->tag,
        };
    }
    if (taken > 0)
        espgw_chacha_batch(sa->enc_keys, what == ESPGW_SEAL, chacha_ops, taken);
    for (uint32_t i = 0, r = 0; i < chunk; i++) {
        if (r < rest && rest_at[r] == i) {
            r++;
            continue;
        }
        ops[i].status = 0;
    }
    if (rest == chunk) {
        mb_esp_library(m, NULL, sa, what, ops, chunk);
    } else if (rest > 0) {
        for (uint32_t r = 0; r < rest; r++)
            chacha_rest[r] = ops[rest_at[r]];
        mb_esp_library(m, NULL, sa, what, chacha_rest, rest);
        for (uint32_t r = 0; r < rest; r++)
            ops[rest_at[r]] = chacha_rest[r];
    }
}

/* Runs `what` on `n` ops of one SA through manager `m`, HMAC-SHA-1 and HMAC-SHA-256 ICVs
 * through `sha` where it is not NULL (espgw_mb_new_sha); returns how many failed. */
int espgw_mb_esp(IMB_MGR *m, IMB_MGR *sha, const struct espgw_mb_sa *sa, int what,
                 struct espgw_mb_op *ops, uint32_t n)
{
    int failed = 0;

    if (sa->cipher == ESPGW_C_CHACHA && sa->chacha_batch &&
        (what == ESPGW_SEAL || what == ESPGW_OPEN_AEAD)) {
        for (uint32_t done = 0; done < n; done += CHACHA_CHUNK)
            chacha_chunk(m, sa, what, ops + done,
                         n - done < CHACHA_CHUNK ? n - done : CHACHA_CHUNK);
    } else {
        mb_esp_library(m, sha, sa, what, ops, n);
    }
    for (uint32_t i = 0; i < n; i++)
        if (ops[i].status != 0)
            failed++;
    return failed;
}

/*
 * AES-GMAC (RFC 4543): GCM of an empty text, the authenticated bytes as its AAD. Where
 * `batch_key` is given, ops go through the batch kernel's GMAC passes first
 * (espgw_gmac_batch, the 256-bit kernel: four at a time up to ESPGW_GCM_BATCH_TEXT_MAX
 * bytes, 1.6-1.7x the library's call at 56 bytes; longer ones one at a time), and any it
 * leaves one call each through the direct GCM API (the
 * library's GMAC job runs older code: on the CPUs measured, 10.2 against 16.9 Mops at
 * 1040 bytes). Each op is a struct espgw_aead_op whose `text`/`len` are the covered bytes
 * (`aad_len` 0), its status ESPGW_OP_PENDING on entry and ESPGW_OP_DONE after: every op
 * completes. Built by `gmac_run` in src/ipsec_mb_esp.rs.
 *
 * `esn`: the ops are ESP packets of an SA with extended sequence numbers, whose AAD has
 * the sequence number's high half between the SPI and the low half (RFC 4543 §3.3: SPI
 * || high || low || IV || payload), a range the packet does not hold. Each op's `aad`
 * holds those four bytes (see gmac_esn). Not through the batch kernel, whose passes
 * take one range.
 */

/* One GMAC tag over `len` bytes at `covered` in one call of the direct GCM API. */
static void gmac_whole(IMB_MGR *m, const struct gcm_key_data *kd, uint32_t key_bytes,
                       struct gcm_context_data *ctx, struct espgw_aead_op *op,
                       const uint8_t *covered, uint64_t len)
{
    /* No text: in and out are never touched, but must be valid pointers. */
    uint8_t *none = op->tag;
    switch (key_bytes) {
    case 16: IMB_AES128_GCM_ENC(m, kd, ctx, none, none, 0, op->iv, covered, len, op->tag, op->tag_len); break;
    case 24: IMB_AES192_GCM_ENC(m, kd, ctx, none, none, 0, op->iv, covered, len, op->tag, op->tag_len); break;
    default: IMB_AES256_GCM_ENC(m, kd, ctx, none, none, 0, op->iv, covered, len, op->tag, op->tag_len); break;
    }
    op->status = ESPGW_OP_DONE;
}

/* The library's incremental GMAC for a key of `key_bytes`. */
struct gmac_steps {
    aes_gmac_init_t init;
    aes_gmac_update_t update;
    aes_gmac_finalize_t finalize;
};

static struct gmac_steps gmac_steps(IMB_MGR *m, uint32_t key_bytes)
{
    switch (key_bytes) {
    case 16: return (struct gmac_steps){m->gmac128_init, m->gmac128_update, m->gmac128_finalize};
    case 24: return (struct gmac_steps){m->gmac192_init, m->gmac192_update, m->gmac192_finalize};
    default: return (struct gmac_steps){m->gmac256_init, m->gmac256_update, m->gmac256_finalize};
    }
}

/* The longest ESN packet whose AAD gmac_esn gathers on the stack. */
#define GMAC_ESN_GATHER_MAX 2048

/*
 * An ESN packet's tag. Up to GMAC_ESN_GATHER_MAX bytes, its AAD is gathered on the stack
 * and hashed in one call: the copy (L1-resident, the packet was just read or written)
 * costs less than the library's incremental GMAC, whose four calls a packet ran a
 * 64-byte frame at 0.7x of the one-call rate. Longer (jumbo frames): the incremental
 * GMAC, its first sixteen bytes put together here and the rest hashed where it lies.
 */
static void gmac_esn(IMB_MGR *m, const struct gcm_key_data *kd, uint32_t key_bytes,
                     struct gcm_context_data *ctx, struct espgw_aead_op *op)
{
    uint8_t aad[GMAC_ESN_GATHER_MAX + 4];

    /* SPI (4), the low half (4) and the IV (8) at least: shorter is not ESP, and the op
     * stays pending (failed). */
    if (op->len < 16)
        return;
    memcpy(aad, op->text, 4);
    memcpy(aad + 4, op->aad, 4);
    if (op->len <= GMAC_ESN_GATHER_MAX) {
        memcpy(aad + 8, op->text + 4, op->len - 4);
        gmac_whole(m, kd, key_bytes, ctx, op, aad, op->len + 4);
        return;
    }
    memcpy(aad + 8, op->text + 4, 8);
    struct gmac_steps g = gmac_steps(m, key_bytes);
    g.init(kd, ctx, op->iv, 12);
    g.update(kd, ctx, aad, 16);
    g.update(kd, ctx, op->text + 12, op->len - 12);
    g.finalize(kd, ctx, op->tag, op->tag_len);
    op->status = ESPGW_OP_DONE;
}

void espgw_gmac_direct(IMB_MGR *m, const uint8_t *batch_key, const struct gcm_key_data *kd,
                       uint32_t key_bytes, uint32_t esn, struct espgw_aead_op *ops, uint32_t n)
{
    struct gcm_context_data ctx;
    uint32_t done = batch_key && !esn ? espgw_gmac_batch(batch_key, kd, key_bytes, ops, n) : 0;

    if (done == n)
        return;
    for (uint32_t i = 0; i < n; i++) {
        struct espgw_aead_op *op = &ops[i];
        if (op->status != ESPGW_OP_PENDING)
            continue;
        if (esn)
            gmac_esn(m, kd, key_bytes, &ctx, op);
        else
            gmac_whole(m, kd, key_bytes, &ctx, op, op->text, op->len);
    }
    explicit_bzero(&ctx, sizeof(ctx));
}

/* AES key schedules: encryption and decryption (16-byte aligned, 240 bytes each). */
int espgw_mb_aes_keyexp(IMB_MGR *m, uint32_t key_bytes, const uint8_t *key, void *enc,
                        void *dec)
{
    switch (key_bytes) {
    case 16: IMB_AES_KEYEXP_128(m, key, enc, dec); break;
    case 24: IMB_AES_KEYEXP_192(m, key, enc, dec); break;
    case 32: IMB_AES_KEYEXP_256(m, key, enc, dec); break;
    default: return -1;
    }
    return 0;
}

/* AES-XCBC-MAC (RFC 3566): K1 expanded (176 bytes), K2 and K3 (16 bytes each). */
void espgw_mb_xcbc_keyexp(IMB_MGR *m, const uint8_t *key, void *k1, void *k2, void *k3)
{
    IMB_AES_XCBC_KEYEXP(m, key, k1, k2, k3);
}

/*
 * HMAC (RFC 2104): the hash state after one block of key ^ ipad and of key ^ opad, which
 * the job API continues from. Keys no longer than the block only (every IPsec HMAC key
 * is the digest's length). Returns -1 for an unknown hash or a key that is too long.
 */
int espgw_mb_hmac_precompute(IMB_MGR *m, int32_t hash, const uint8_t *key, uint32_t key_len,
                             uint8_t *ipad_state, uint8_t *opad_state)
{
    uint8_t block[128];
    uint32_t block_len = (hash == ESPGW_H_SHA384 || hash == ESPGW_H_SHA512) ? 128 : 64;
    int rc = 0;

    if (key_len > block_len)
        return -1;
    for (int pass = 0; pass < 2 && rc == 0; pass++) {
        uint8_t pad = pass == 0 ? 0x36 : 0x5c;
        uint8_t *out = pass == 0 ? ipad_state : opad_state;
        memset(block, pad, block_len);
        for (uint32_t i = 0; i < key_len; i++)
            block[i] ^= key[i];
        switch (hash) {
        case ESPGW_H_SHA1: IMB_SHA1_ONE_BLOCK(m, block, out); break;
        case ESPGW_H_SHA256: IMB_SHA256_ONE_BLOCK(m, block, out); break;
        case ESPGW_H_SHA384: IMB_SHA384_ONE_BLOCK(m, block, out); break;
        case ESPGW_H_SHA512: IMB_SHA512_ONE_BLOCK(m, block, out); break;
        case ESPGW_H_MD5: IMB_MD5_ONE_BLOCK(m, block, out); break;
        default: rc = -1; break;
        }
    }
    explicit_bzero(block, sizeof(block));
    return rc;
}
