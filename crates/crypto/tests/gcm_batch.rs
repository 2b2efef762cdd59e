//! The batch AES-GCM kernels (`csrc/gcm_batch.c`, `csrc/gcm_batch_avx2.c`, and on CPUs
//! without VAES `csrc/gcm_batch_aesni.c`, texts of up to 64 bytes) against
//! intel-ipsec-mb's one-packet direct API and against aws-lc-rs (an independent
//! implementation): random bursts of AES-128/192/256-GCM ESP packets with 8-, 12- and
//! 16-byte ICVs, with and without ESN (8- and 12-byte AAD), texts on both sides of the
//! kernels' limits (64 bytes for the four-block groups, 128 for the eight-block ones,
//! beyond which the 256-bit kernel takes one packet at a time in groups of 256 and 128
//! bytes and the AVX-512 host calls the library), up to 1,604 bytes and jumbo ones; all
//! three seal to the same bytes, each opens what the others sealed, and a tampered packet
//! fails alone. The same for ESP's and AH's AES-GMAC (RFC 4543), whose ICVs the 256-bit
//! kernel computes (its GMAC passes) where it runs.

use espgw_crypto::suite::all_esp_suites;
use espgw_crypto::{provider, AhKey, AhOp, Encryption, Icv, Integrity, ProviderChoice, Suite};
use proptest::prelude::*;

mod esp_burst;
use esp_burst::{agree, agree_burst, multi_buffer_built};

/// AES-GCM and AES-GMAC: the suites a batch kernel runs.
fn batch_suites() -> Vec<Suite> {
    all_esp_suites()
        .into_iter()
        .filter(|s| {
            matches!(
                s.enc,
                Encryption::AesGcm { .. } | Encryption::AesGmac { .. }
            )
        })
        .collect()
}

/// Whether this CPU has what the kernel needs; where it does, the default provider must
/// say it runs the kernel (so these tests never pass by comparing the library with itself).
fn kernel_expected() -> bool {
    let vector_aes = std::is_x86_feature_detected!("vaes")
        && std::is_x86_feature_detected!("vpclmulqdq")
        && std::is_x86_feature_detected!("aes")
        && std::is_x86_feature_detected!("pclmulqdq");
    let avx512 = std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512bw")
        && std::is_x86_feature_detected!("avx512vl");
    let avx2 = std::is_x86_feature_detected!("avx2");
    let aes_ni = std::is_x86_feature_detected!("aes") && std::is_x86_feature_detected!("pclmulqdq");
    let name = provider(ProviderChoice::IpsecMb).unwrap().name();
    let expected = match (vector_aes, avx512, avx2) {
        (true, true, _) => Some("batch AES-GCM/avx512"),
        (true, false, true) => Some("batch AES-GCM/vaes-avx2"),
        (false, _, true) if aes_ni => Some("batch AES-GCM/aesni"),
        _ => None,
    };
    match expected {
        Some(kernel) => assert!(name.contains(kernel), "provider {name}, want {kernel}"),
        None => assert!(!name.contains("batch AES-GCM"), "provider {name}"),
    }
    expected.is_some()
}

#[test]
fn the_kernel_runs_where_the_cpu_allows() {
    if multi_buffer_built() {
        eprintln!("batch kernel on this CPU: {}", kernel_expected());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random bursts (1-48 packets of 0-1600 bytes of payload, a fifth tampered with: a
    /// header, IV, text or ICV byte) under a random AES-GCM or AES-GMAC suite.
    #[test]
    fn batch_direct_and_aws_lc_agree(
        suite in prop::sample::select(batch_suites()),
        esn: bool,
        seed: u8,
        burst in prop::collection::vec(
            (0usize..1600, any::<u8>(), prop::option::weighted(0.2, any::<usize>())),
            1..48,
        ),
    ) {
        if !multi_buffer_built() {
            return Ok(());
        }
        kernel_expected();
        agree_burst(suite, esn, seed, &burst);
    }
}

/// Every text length from 4 to 1604 bytes (across the kernel's 64- and 128-byte limits, so
/// one burst mixes both of its groups and the library), every suite, with and without ESN, every
/// seventh packet's ICV broken.
#[test]
fn every_length_across_the_limit_agrees() {
    if !multi_buffer_built() {
        return;
    }
    kernel_expected();
    for suite in batch_suites() {
        for esn in [false, true] {
            // Payloads 0..=1602 give texts (payload + 2, padded to 4) of 4..=1604 bytes.
            let payloads: Vec<(usize, u8)> = (0..=1602).map(|l| (l, l as u8)).collect();
            let tamper: Vec<Option<usize>> = (0..payloads.len())
                .map(|i| (i % 7 == 3).then_some(usize::MAX))
                .collect();
            agree(suite, esn, 9, &payloads, &tamper);
        }
    }
}

/// The 256-bit kernel's three four-packet passes side by side: groups whose texts all fit
/// 64 bytes (two chains a packet), groups of 65-128 bytes that all fit 96 (the middle pass,
/// three chains), groups with one text past 96 (the wide pass, four), and texts past 128
/// (one at a time), in bursts of 1-9 so that every remainder of a group ends one; every
/// suite, with and without ESN, every fifth packet tampered with. (ESP AES-GMAC's covered
/// bytes are 16 more than the text, so its groups fall into the passes 16 bytes earlier.)
#[test]
fn short_middle_and_wide_groups_agree() {
    if !multi_buffer_built() {
        return;
    }
    kernel_expected();
    for suite in batch_suites() {
        for esn in [false, true] {
            for n in 1..=9usize {
                for base in (40..=96).step_by(4) {
                    // Four lengths a group, 12 bytes apart at most; in bursts of odd size
                    // the last packet 40 bytes longer, into the next pass.
                    let payloads: Vec<(usize, u8)> = (0..n)
                        .map(|i| {
                            let len = if n % 2 == 1 && i == n - 1 {
                                base + 40
                            } else {
                                base + 4 * (i % 4)
                            };
                            (len, (base + i) as u8)
                        })
                        .collect();
                    let tamper: Vec<Option<usize>> = (0..n)
                        .map(|i| ((base / 4 + i) % 5 == 1).then_some(base + i))
                        .collect();
                    agree(suite, esn, base as u8, &payloads, &tamper);
                }
            }
        }
    }
}

fn gmac_suites() -> Vec<Suite> {
    batch_suites()
        .into_iter()
        .filter(|s| matches!(s.enc, Encryption::AesGmac { .. }))
        .collect()
}

/// ESP AES-GMAC in bursts of every size from 1 to 9 (so that every remainder of the
/// kernel's groups of four, short and wide, ends a burst), the ICV covering 20 to 560
/// bytes (header, IV and payload: both of the kernel's groups and, beyond 128, the
/// 256-bit kernel's one-packet pass or the library), every fifth packet tampered with.
#[test]
fn gmac_bursts_of_every_size_agree() {
    if !multi_buffer_built() {
        return;
    }
    kernel_expected();
    for suite in gmac_suites() {
        for n in 1..=9usize {
            for start in (0..=144).step_by(4) {
                let payloads: Vec<(usize, u8)> = (0..n)
                    .map(|i| ((start + 37 * i) % 145 + 400 * (i % 2), (start + i) as u8))
                    .collect();
                let tamper: Vec<Option<usize>> = (0..n)
                    .map(|i| ((start / 4 + i) % 5 == 2).then_some(start + i))
                    .collect();
                agree(suite, false, start as u8, &payloads, &tamper);
            }
        }
    }
}

/// AH's AES-GMAC ICV (RFC 4543 §5) through the batch kernel and the library alone, for
/// every text length from 1 to 700 bytes and some jumbo ones, in bursts of 1-9, against
/// aws-lc-rs's one-packet MAC.
#[test]
fn ah_gmac_bursts_agree_with_the_one_packet_mac() {
    if !multi_buffer_built() {
        return;
    }
    kernel_expected();
    for key_len in [16, 24, 32] {
        let integ = Integrity::AesGmac { key_len };
        let key: Vec<u8> = (0..integ.key_len())
            .map(|i| (i as u8).wrapping_mul(7) ^ 0x5c)
            .collect();
        let portable =
            AhKey::with_provider(&*provider(ProviderChoice::AwsLc).unwrap(), integ, &key).unwrap();
        let paths: Vec<(&str, AhKey)> = [
            ("batch", ProviderChoice::IpsecMb),
            ("direct", ProviderChoice::IpsecMbDirect),
        ]
        .into_iter()
        .map(|(name, c)| {
            (
                name,
                AhKey::with_provider(&*provider(c).unwrap(), integ, &key).unwrap(),
            )
        })
        .collect();
        for (name, k) in &paths {
            assert!(k.is_multi_buffer(), "{name}: AH GMAC not on intel-ipsec-mb");
        }
        let mut lens = (1..=700usize).chain([1500, 4099, 9000]).peekable();
        let mut n = 1;
        while lens.peek().is_some() {
            let texts: Vec<Vec<u8>> = lens
                .by_ref()
                .take(n)
                .map(|len| (0..len).map(|b| (b * 13 + len) as u8).collect())
                .collect();
            let ivs: Vec<[u8; 8]> = texts
                .iter()
                .map(|t| (t.len() as u64 * 0x0101_0101).to_be_bytes())
                .collect();
            for (name, k) in &paths {
                let mut bufs = texts.clone();
                // Stale ICVs in the slots: every op must overwrite its own.
                let mut icvs = vec![Icv::NONE; texts.len()];
                for icv in &mut icvs {
                    icv.set(&[0xee; 12]);
                }
                let mut ops: Vec<AhOp<'_>> = bufs
                    .iter_mut()
                    .zip(&ivs)
                    .zip(icvs.iter_mut())
                    .map(|((text, iv), icv)| AhOp { text, iv: *iv, icv })
                    .collect();
                k.tag_burst(&mut ops);
                drop(ops);
                for ((text, iv), icv) in texts.iter().zip(&ivs).zip(&icvs) {
                    let want = portable.tag(iv, &[text]).unwrap();
                    assert_eq!(
                        icv.get(),
                        Some(&want.as_slice()[..integ.icv_len()]),
                        "{name} AES-{} GMAC, {} bytes, burst of {}",
                        key_len * 8,
                        text.len(),
                        texts.len()
                    );
                }
                assert_eq!(bufs, texts, "{name}: GMAC left the text as it was");
            }
            n = n % 9 + 1;
        }
    }
}

/// Jumbo texts (4 KB, 9 KB frames and a 60 KB packet), every AES-GCM and AES-GMAC suite:
/// the 256-bit kernel's one-packet pass (or the AVX-512 host's library) agrees with the
/// library alone and aws-lc-rs far past a 1,500-byte MTU, and a tampered one fails alone.
#[test]
fn jumbo_texts_agree() {
    if !multi_buffer_built() {
        return;
    }
    kernel_expected();
    for suite in batch_suites() {
        let payloads = [(4093, 1), (8999, 2), (60_001, 3), (257, 4)];
        let tamper = [None, Some(usize::MAX), None, None];
        for esn in [false, true] {
            agree(suite, esn, 77, &payloads, &tamper);
        }
    }
}
