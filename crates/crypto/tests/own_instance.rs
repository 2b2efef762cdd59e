//! A worker's private instance of intel-ipsec-mb ([`OwnInstance`]): the thread that adopts
//! one runs code from its own copy of the library (so the library's per-call write of its
//! process-wide errno lands in that copy's globals, not in a line every worker shares), and
//! every suite seals there to the same bytes as through the shared instance, which the
//! portable back-end (aws-lc-rs and RustCrypto, independent code) opens.

use std::sync::Arc;

use espgw_crypto::ipsec_mb::{this_threads_code, OwnInstance};
use espgw_crypto::suite::all_esp_suites;
use espgw_crypto::{esp_key, provider, EspKey, EspOp, ProviderChoice};

mod esp_burst;
use esp_burst::{multi_buffer_built, packet, seal};

/// Whether the tests here can run: intel-ipsec-mb built in, and the shim not under
/// AddressSanitizer (whose runtime refuses the deep binding an instance is loaded with, so
/// there `OwnInstance::load` gives none: scripts/asan-shims.sh).
fn instances_testable() -> bool {
    if std::env::var("ESPGW_SANITIZE").as_deref() == Ok("address") {
        assert!(OwnInstance::load().is_none());
        return false;
    }
    multi_buffer_built()
}

/// Two instances loaded on one thread and adopted on two others: three different copies
/// of the library, none of them the process's shared one, each run by its own thread.
#[test]
fn an_adopted_instance_runs_its_own_copy_of_the_library() {
    if !instances_testable() {
        return;
    }
    let (shared_file, shared_base) = this_threads_code().expect("a manager");
    assert!(shared_file.contains("libIPSec_MB"), "{shared_file}");
    let a = OwnInstance::load().expect("a private instance");
    let b = OwnInstance::load().expect("a second private instance");
    let (a_file, a_base) = a.code();
    let (_, b_base) = b.code();
    assert!(a_file.starts_with("/proc/self/fd/"), "{a_file}");
    assert_ne!(a_base, shared_base);
    assert_ne!(b_base, shared_base);
    assert_ne!(a_base, b_base);
    let seen: Vec<usize> = [a, b]
        .into_iter()
        .map(|i| {
            std::thread::spawn(move || {
                let (_, base) = i.code();
                i.adopt();
                let (_, running) = this_threads_code().expect("the adopted manager");
                assert_eq!(running, base);
                running
            })
            .join()
            .unwrap()
        })
        .collect();
    assert_eq!(seen, [a_base, b_base]);
    // This thread still runs the shared instance.
    assert_eq!(this_threads_code().unwrap().1, shared_base);
}

/// Every suite, keys made on this thread: sealed by a thread running its own instance, the
/// burst is byte for byte what the shared instance seals, and the portable back-end opens it.
#[test]
fn every_suite_seals_the_same_through_an_own_instance() {
    if !instances_testable() {
        return;
    }
    let mb = provider(ProviderChoice::IpsecMb).unwrap();
    let portable = provider(ProviderChoice::AwsLc).unwrap();
    for suite in all_esp_suites().into_iter().filter(|s| !s.is_null_null()) {
        let enc: Vec<u8> = (0..suite.enc.key_material_len())
            .map(|i| i as u8 ^ 0x5a)
            .collect();
        let auth: Vec<u8> = (0..suite.integ.key_len())
            .map(|i| (i as u8).wrapping_mul(7))
            .collect();
        let key: Arc<dyn EspKey> = esp_key(&*mb, suite, &enc, &auth, false).unwrap();
        let check = esp_key(&*portable, suite, &enc, &auth, false).unwrap();
        let seqs: Vec<u64> = (1..=40).collect();
        let ivs: Vec<[u8; 16]> = seqs.iter().map(|&s| [s as u8 ^ 0xa5; 16]).collect();
        let plain: Vec<Vec<u8>> = seqs
            .iter()
            .map(|&s| packet(suite, 0x1234, s, (s as usize * 37) % 1400, s as u8))
            .collect();
        let mut here = plain.clone();
        seal(&*key, &mut here, &seqs, &ivs);
        let instance = OwnInstance::load().expect("a private instance");
        let (k, s, i, p) = (key.clone(), seqs.clone(), ivs.clone(), plain.clone());
        let there = std::thread::spawn(move || {
            instance.adopt();
            let mut bufs = p;
            seal(&*k, &mut bufs, &s, &i);
            bufs
        })
        .join()
        .unwrap();
        assert_eq!(there, here, "{suite:?}");
        assert_ne!(there, plain, "{suite:?}: nothing was sealed");
        let mut ok = vec![false; there.len()];
        let mut bufs = there;
        let mut ops: Vec<EspOp<'_>> = bufs
            .iter_mut()
            .zip(&seqs)
            .map(|(b, &seq)| EspOp { esp: b, seq })
            .collect();
        check.open_burst(&mut ops, &mut ok);
        assert!(
            ok.iter().all(|&o| o),
            "{suite:?}: the portable back-end refused"
        );
    }
}
