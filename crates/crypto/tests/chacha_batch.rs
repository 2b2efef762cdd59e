//! espgw's ChaCha20-Poly1305 kernel (`csrc/chacha_batch.c`, short texts many packets at
//! once) against intel-ipsec-mb's one-packet code and against aws-lc-rs (an independent
//! implementation): random bursts of ESP ChaCha20-Poly1305 packets (RFC 7634) with and
//! without ESN (8- and 12-byte AAD), texts on both sides of the kernel's limits (1,024
//! bytes with AVX-512 IFMA, 256 without; beyond, the library takes them, so that one burst
//! mixes both), bursts of every size around the kernel's sixteen-lane ChaCha20 passes, its
//! eight-lane IFMA Poly1305 groups and its 64-op chunks; all three seal to
//! the same bytes, each opens what the others sealed, and a tampered packet fails alone
//! (and, through the kernel, is never decrypted: its text is wiped like any failed one's).
//! RFC 7634's own vector runs through the kernel too (`esp_kat.rs`, every provider).
//! Every test runs with the long texts on each of their two paths beside the kernel
//! (`ChaChaLongTexts`: the library's job, or aws-lc-rs's one-packet code), so that "batch"
//! is never the same code as "direct" or "aws-lc" on both sides of the limit.

use espgw_crypto::ipsec_mb::{chacha_long_texts_on_this_thread, ChaChaLongTexts};
use espgw_crypto::{provider, Encryption, Integrity, ProviderChoice, Suite};
use proptest::prelude::*;

mod esp_burst;
use esp_burst::{agree, agree_burst, multi_buffer_built};

const CHACHA: Suite = Suite {
    enc: Encryption::ChaCha20Poly1305,
    integ: Integrity::None,
};

/// The kernel's limit without AVX-512 IFMA (`ESPGW_CHACHA_BATCH_SCALAR_TEXT_MAX`); with
/// it, 1,024 bytes (`ESPGW_CHACHA_BATCH_TEXT_MAX`).
// Used only in a const assertion below, which rustc 1.88 (the MSRV) does not count as a use.
#[allow(dead_code)]
const SCALAR_TEXT_MAX: usize = 256;

/// Whether this CPU runs the kernel (AVX-512 F and BW, or AVX2); where it does, the
/// default provider must say so, and with which, so that these tests never pass by
/// comparing the library with itself.
fn kernel_expected() -> bool {
    let isa =
        if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512bw") {
            Some("avx512")
        } else if std::is_x86_feature_detected!("avx2") {
            Some("avx2")
        } else {
            None
        };
    let name = provider(ProviderChoice::IpsecMb).unwrap().name();
    let named = name
        .split(" + batch ChaCha20-Poly1305/")
        .nth(1)
        .map(|rest| rest.split(' ').next().unwrap_or(rest));
    assert_eq!(named, isa, "provider {name}");
    isa.is_some()
}

/// Runs `f` with the long texts (past the kernel's limit) of SAs built on this thread on
/// each path in turn: the library, then aws-lc-rs (where the kernel runs). Each time the
/// provider's name says where they go.
fn with_each_long_text_path(mut f: impl FnMut()) {
    for choice in [ChaChaLongTexts::Library, ChaChaLongTexts::AwsLc] {
        let to_aws_lc = chacha_long_texts_on_this_thread(choice).expect("intel-ipsec-mb");
        let name = provider(ProviderChoice::IpsecMb).unwrap().name();
        assert_eq!(
            name.contains(" B on aws-lc-rs)"),
            to_aws_lc,
            "{choice:?}: provider {name}"
        );
        f();
    }
    chacha_long_texts_on_this_thread(ChaChaLongTexts::Auto);
}

/// The default sends the long texts to aws-lc-rs exactly where the kernel runs in AVX2
/// (measured faster than the library's job on the Zen 1 host, README), and says so.
#[test]
fn long_texts_go_to_aws_lc_where_the_kernel_runs_in_avx2() {
    if !multi_buffer_built() {
        return;
    }
    let avx2_kernel = kernel_expected()
        && !(std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512bw"));
    let to_aws_lc = chacha_long_texts_on_this_thread(ChaChaLongTexts::Auto).unwrap();
    assert_eq!(to_aws_lc, avx2_kernel);
    let name = provider(ProviderChoice::IpsecMb).unwrap().name();
    assert_eq!(
        name.contains("batch ChaCha20-Poly1305/avx2 (texts over 256 B on aws-lc-rs)"),
        avx2_kernel,
        "provider {name}"
    );
    assert!(!chacha_long_texts_on_this_thread(ChaChaLongTexts::Library).unwrap());
    chacha_long_texts_on_this_thread(ChaChaLongTexts::Auto);
}

#[test]
fn the_kernel_runs_where_the_cpu_allows() {
    if multi_buffer_built() {
        eprintln!(
            "ChaCha20-Poly1305 kernel on this CPU: {}",
            kernel_expected()
        );
    }
}

/// Payload lengths whose texts (payload + 2, padded to 4) fall on both sides of the
/// kernel's limit and of a Poly1305 or ChaCha20 block.
fn straddling(i: usize) -> usize {
    let near = [
        0, 1, 13, 14, 45, 46, 61, 62, 126, 190, 250, 253, 254, 255, 258, 300, 1400,
    ];
    near[i % near.len()]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random bursts (1-80 packets of 0-1,700 bytes of payload, a fifth tampered with: a
    /// header, IV, text or ICV byte).
    #[test]
    fn batch_direct_and_aws_lc_agree(
        esn: bool,
        seed: u8,
        burst in prop::collection::vec(
            (0usize..1700, any::<u8>(), prop::option::weighted(0.2, any::<usize>())),
            1..80,
        ),
    ) {
        if !multi_buffer_built() {
            return Ok(());
        }
        kernel_expected();
        with_each_long_text_path(|| agree_burst(CHACHA, esn, seed, &burst));
    }
}

/// Every text length from 4 to 1,704 bytes in one burst (across the kernel's limits: the
/// kernel and the library in one call), with and without ESN, every seventh packet's ICV
/// broken.
#[test]
fn every_length_across_the_limit_agrees() {
    if !multi_buffer_built() {
        return;
    }
    kernel_expected();
    for esn in [false, true] {
        let payloads: Vec<(usize, u8)> = (0..=1702).map(|l| (l, l as u8)).collect();
        let tamper: Vec<Option<usize>> = (0..payloads.len())
            .map(|i| (i % 7 == 3).then_some(usize::MAX))
            .collect();
        with_each_long_text_path(|| agree(CHACHA, esn, 9, &payloads, &tamper));
    }
}

/// Bursts of every size from 1 to 70 (every remainder of the sixteen-lane passes and of
/// the interleaved Poly1305 pairs, and past a 64-op chunk), short texts and long ones
/// mixed, every fifth packet tampered with somewhere.
#[test]
fn bursts_of_every_size_agree() {
    if !multi_buffer_built() {
        return;
    }
    kernel_expected();
    for n in 1..=70usize {
        let payloads: Vec<(usize, u8)> = (0..n).map(|i| (straddling(i + n), i as u8)).collect();
        let tamper: Vec<Option<usize>> =
            (0..n).map(|i| (i % 5 == 2).then_some(7 * i + n)).collect();
        with_each_long_text_path(|| agree(CHACHA, n % 2 == 0, n as u8, &payloads, &tamper));
    }
}

/// A burst of short packets all tampered with but one, and one of none tampered: the
/// kernel's verdicts are per packet, whatever the others'.
#[test]
fn forgeries_fail_alone() {
    if !multi_buffer_built() {
        return;
    }
    kernel_expected();
    let payloads: Vec<(usize, u8)> = (0..40).map(|i| (32 + i, i as u8)).collect();
    let all_but_one: Vec<Option<usize>> = (0..40)
        .map(|i| (i != 17).then_some(usize::MAX - i))
        .collect();
    agree(CHACHA, false, 3, &payloads, &all_but_one);
    agree(CHACHA, true, 4, &payloads, &vec![None; 40]);
}

// The texts of `forgeries_fail_alone` (34-73 bytes, padded) go through the kernel.
const _: () = assert!(SCALAR_TEXT_MAX >= 32 + 40 + 2 + 3);
