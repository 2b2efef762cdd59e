//! HMAC-SHA-1 and HMAC-SHA-256 through the CPU's SHA extensions (SHA-NI: intel-ipsec-mb's
//! SSE manager, `ShaExtensions`) and through the library's vector lanes give the same
//! ESP packets and AH ICVs as the portable back-end (aws-lc-rs, independent code): both
//! paths, chosen per thread, on a CPU that has both; the published answers run through
//! the default path in `esp_kat.rs` and `ah_burst.rs`.

use std::sync::Arc;

use espgw_crypto::ipsec_mb::{
    sha_extensions_on_this_thread, this_threads_code, this_threads_sha_code, OwnInstance,
    ShaExtensions,
};
use espgw_crypto::suite::all_esp_suites;
use espgw_crypto::{esp_key, provider, AhKey, EspKey, Integrity, ProviderChoice, Suite};

mod esp_burst;
use esp_burst::{ah_icvs, multi_buffer_built, open, packet, seal};

/// Whether this CPU has the SHA extensions, so that `On` must give them.
fn cpu_has_sha_ni() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("sha");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Sets this thread's path and checks that the shim made it where it should.
fn choose(choice: ShaExtensions) -> bool {
    let on = sha_extensions_on_this_thread(choice).expect("a manager");
    match choice {
        ShaExtensions::On => assert_eq!(on, cpu_has_sha_ni()),
        ShaExtensions::Off => assert!(!on),
        ShaExtensions::Auto => assert!(!on || cpu_has_sha_ni()),
    }
    on
}

/// The suites whose ICV SHA-NI computes.
fn sha_suites() -> Vec<Suite> {
    all_esp_suites()
        .into_iter()
        .filter(|s| matches!(s.integ, Integrity::HmacSha1_96 | Integrity::HmacSha256_128))
        .collect()
}

fn keys(suite: Suite, esn: bool) -> (Arc<dyn EspKey>, Arc<dyn EspKey>) {
    let enc: Vec<u8> = (0..suite.enc.key_material_len())
        .map(|i| (i as u8).wrapping_mul(11) ^ 0x3c)
        .collect();
    let auth: Vec<u8> = (0..suite.integ.key_len())
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(5))
        .collect();
    let mb = provider(ProviderChoice::IpsecMb).unwrap();
    let portable = provider(ProviderChoice::AwsLc).unwrap();
    (
        esp_key(&*mb, suite, &enc, &auth, esn).unwrap(),
        esp_key(&*portable, suite, &enc, &auth, esn).unwrap(),
    )
}

/// For one suite: a burst of 70 packets of 0-1,449 bytes (so more than one of the
/// library's chunks of 64, and every block remainder), sealed through this thread's path
/// with the IVs injected, is byte for byte what the portable back-end seals; each side
/// opens the other's burst, where every fifth packet, tampered with, fails alone.
fn agree_with_the_portable_back_end(suite: Suite, esn: bool, path: &str) {
    let (mb, portable) = keys(suite, esn);
    let seqs: Vec<u64> = (0..70).map(|i| (3u64 << 32) - 35 + i).collect();
    let ivs: Vec<[u8; 16]> = (0..70).map(|i| [i as u8 ^ 0x6b; 16]).collect();
    let plain: Vec<Vec<u8>> = seqs
        .iter()
        .enumerate()
        .map(|(i, &s)| packet(suite, 0x4242, s, i * 21, i as u8))
        .collect();
    let mut by_mb = plain.clone();
    let mut by_portable = plain.clone();
    seal(&*mb, &mut by_mb, &seqs, &ivs);
    seal(&*portable, &mut by_portable, &seqs, &ivs);
    for (i, (a, b)) in by_mb.iter().zip(&by_portable).enumerate() {
        assert!(
            a == b,
            "{suite} esn {esn} {path}: packet {i} sealed differently"
        );
    }
    assert_ne!(by_mb, plain, "{suite} {path}: nothing sealed");
    for (i, (a, b)) in by_mb.iter_mut().zip(&mut by_portable).enumerate() {
        if i % 5 == 2 {
            let at = [a.len() - 1, 9, a.len() / 2][i % 3];
            a[at] ^= 0x10;
            b[at] ^= 0x10;
        }
    }
    let want: Vec<bool> = (0..70).map(|i| i % 5 != 2).collect();
    assert_eq!(
        open(&*mb, &mut by_portable, &seqs),
        want,
        "{suite} esn {esn} {path}: open"
    );
    assert_eq!(
        open(&*portable, &mut by_mb, &seqs),
        want,
        "{suite} esn {esn}: portable open"
    );
}

/// Every ESP suite with HMAC-SHA-1-96 or HMAC-SHA-256-128, with and without ESN, through
/// the SHA extensions and through the vector lanes, against the portable back-end.
#[test]
fn esp_hmac_sha_agrees_on_both_paths() {
    if !multi_buffer_built() {
        return;
    }
    let suites = sha_suites();
    assert!(suites.len() >= 8, "{} suites", suites.len());
    for choice in [ShaExtensions::On, ShaExtensions::Off] {
        let on = choose(choice);
        let path = if on { "SHA-NI" } else { "vector lanes" };
        for &suite in &suites {
            for esn in [false, true] {
                agree_with_the_portable_back_end(suite, esn, path);
            }
        }
    }
    choose(ShaExtensions::Auto);
}

/// AH's HMAC-SHA-1-96 and HMAC-SHA-256-128 ICVs over texts of 1-1,481 bytes in one burst
/// of 75 (an AH text is never empty: it holds at least the IP and AH headers), on both paths: each the portable back-end's one-packet ICV.
#[test]
fn ah_hmac_sha_agrees_on_both_paths() {
    if !multi_buffer_built() {
        return;
    }
    let mb = provider(ProviderChoice::IpsecMb).unwrap();
    let portable = provider(ProviderChoice::AwsLc).unwrap();
    for integ in [Integrity::HmacSha1_96, Integrity::HmacSha256_128] {
        let key: Vec<u8> = (0..integ.key_len()).map(|i| i as u8 ^ 0x77).collect();
        let fast = AhKey::with_provider(&*mb, integ, &key).unwrap();
        assert!(fast.is_multi_buffer(), "{integ:?}");
        let reference = AhKey::with_provider(&*portable, integ, &key).unwrap();
        let texts: Vec<Vec<u8>> = (0..75)
            .map(|i| {
                (0..1 + i * 20)
                    .map(|b| (b as u8).wrapping_mul(7) ^ i as u8)
                    .collect()
            })
            .collect();
        let want: Vec<Vec<u8>> = texts
            .iter()
            .map(|t| {
                reference.tag(&[], &[t]).expect("an ICV").as_slice()[..integ.icv_len()].to_vec()
            })
            .collect();
        for choice in [ShaExtensions::On, ShaExtensions::Off] {
            let on = choose(choice);
            let got = ah_icvs(&fast, &texts, &vec![[0; 8]; texts.len()]);
            for (i, icv) in got.iter().enumerate() {
                assert_eq!(
                    icv.as_deref(),
                    Some(&want[i][..]),
                    "{integ:?} SHA-NI {on}: text {i}"
                );
            }
        }
    }
    choose(ShaExtensions::Auto);
}

/// The default: the SHA extensions where the CPU has them and the library did not choose
/// its AVX-512 code, and the provider's name says so.
#[test]
fn the_default_path_follows_the_cpu() {
    if !multi_buffer_built() || std::env::var_os("ESPGW_SHA_EXTENSIONS").is_some() {
        return;
    }
    let name = provider(ProviderChoice::IpsecMb).unwrap().name();
    let expected = cpu_has_sha_ni() && !name.starts_with("intel-ipsec-mb/avx512");
    assert_eq!(name.contains("SHA-NI"), expected, "{name}");
    assert_eq!(choose(ShaExtensions::Auto), expected);
}

/// A worker's private instance makes its SHA extensions' manager from its own copy of the
/// library, and seals there as the portable back-end does.
#[test]
fn an_own_instance_hashes_through_its_own_sha_manager() {
    if !multi_buffer_built() || std::env::var("ESPGW_SANITIZE").as_deref() == Ok("address") {
        return;
    }
    let suite = sha_suites()
        .into_iter()
        .find(|s| s.integ == Integrity::HmacSha256_128 && s.iv_len() == 16)
        .expect("AES-CBC with HMAC-SHA-256-128");
    let instance = OwnInstance::load().expect("a private instance");
    let (_, base) = instance.code();
    let shared = this_threads_code().expect("a manager").1;
    std::thread::spawn(move || {
        instance.adopt();
        if choose(ShaExtensions::On) {
            let (file, sha_base) = this_threads_sha_code().expect("a SHA-NI manager");
            assert_eq!(sha_base, base, "{file}: not the instance's copy");
            assert_ne!(sha_base, shared);
        }
        agree_with_the_portable_back_end(suite, true, "own instance, SHA-NI");
    })
    .join()
    .unwrap();
}
