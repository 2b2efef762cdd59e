//! intel-ipsec-mb's multi-buffer ESP path against the portable one-packet path (aws-lc-rs
//! and RustCrypto, independent implementations): for random bursts of mixed SAs, suites
//! and sizes, with the same CBC IVs injected, both seal to the same bytes, each opens
//! what the other sealed, and a tampered packet inside a burst fails alone.

use std::sync::Arc;

use espgw_crypto::suite::all_esp_suites;
use espgw_crypto::{esp_key, provider, EspKey, ProviderChoice, Suite};
use proptest::prelude::*;

mod esp_burst;
use esp_burst::{multi_buffer_built, open, packet, seal};

/// The suites intel-ipsec-mb has a multi-buffer path for (and the rest, which both sides
/// run through the portable transforms: compared too, they must agree trivially).
fn suites() -> Vec<Suite> {
    all_esp_suites()
        .into_iter()
        .filter(|s| !s.is_null_null())
        .collect()
}

struct Sa {
    suite: Suite,
    esn: bool,
    mb: Arc<dyn EspKey>,
    portable: Arc<dyn EspKey>,
}

fn sa(suite: Suite, esn: bool, seed: u8) -> Sa {
    let enc: Vec<u8> = (0..suite.enc.key_material_len())
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect();
    let auth: Vec<u8> = (0..suite.integ.key_len())
        .map(|i| (i as u8).wrapping_mul(29) ^ seed)
        .collect();
    let mb = provider(ProviderChoice::IpsecMb).unwrap();
    let portable = provider(ProviderChoice::AwsLc).unwrap();
    Sa {
        suite,
        esn,
        mb: esp_key(&*mb, suite, &enc, &auth, esn).unwrap(),
        portable: esp_key(&*portable, suite, &enc, &auth, esn).unwrap(),
    }
}

/// One packet of a random burst: its SA, text size, fill byte, and whether (and where)
/// it is tampered with after sealing.
#[derive(Debug, Clone)]
struct Pkt {
    sa: usize,
    payload: usize,
    fill: u8,
    tamper: Option<usize>,
}

fn pkt() -> impl Strategy<Value = Pkt> {
    (
        0usize..3,
        0usize..1500,
        any::<u8>(),
        prop::option::weighted(0.2, any::<usize>()),
    )
        .prop_map(|(sa, payload, fill, tamper)| Pkt {
            sa,
            payload,
            fill,
            tamper,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn multi_buffer_and_one_packet_paths_agree(
        picks in prop::collection::vec((any::<prop::sample::Index>(), any::<bool>()), 3),
        burst in prop::collection::vec(pkt(), 1..80),
        first_seq in 1u64..(1 << 40),
    ) {
        if !multi_buffer_built() {
            return Ok(());
        }
        let all = suites();
        let sas: Vec<Sa> = picks
            .iter()
            .enumerate()
            .map(|(i, (ix, esn))| sa(*ix.get(&all), *esn, i as u8 * 41 + 7))
            .collect();
        // The burst split per SA in arrival order, as the pipeline hands runs to a key.
        for (n, sa) in sas.iter().enumerate() {
            let mine: Vec<&Pkt> = burst.iter().filter(|p| p.sa == n).collect();
            if mine.is_empty() {
                continue;
            }
            let seqs: Vec<u64> = (0..mine.len() as u64).map(|i| first_seq + i).collect();
            let ivs: Vec<[u8; 16]> = mine
                .iter()
                .enumerate()
                .map(|(i, p)| [p.fill ^ i as u8; 16])
                .collect();
            let plain: Vec<Vec<u8>> = mine
                .iter()
                .zip(&seqs)
                .map(|(p, &s)| packet(sa.suite, 0x100 + n as u32, s, p.payload, p.fill))
                .collect();
            let mut by_mb = plain.clone();
            let mut by_portable = plain.clone();
            seal(&*sa.mb, &mut by_mb, &seqs, &ivs);
            seal(&*sa.portable, &mut by_portable, &seqs, &ivs);
            for (i, (a, b)) in by_mb.iter().zip(&by_portable).enumerate() {
                prop_assert!(a == b, "{} esn {}: packet {} of {} sealed differently", sa.suite, sa.esn, i, mine.len());
            }

            // Tamper with some packets, then each side opens the other's burst.
            let mut tampered = vec![false; mine.len()];
            for (i, p) in mine.iter().enumerate() {
                if let Some(at) = p.tamper {
                    let at = at % by_mb[i].len();
                    by_mb[i][at] ^= 0x01;
                    by_portable[i][at] ^= 0x01;
                    tampered[i] = true;
                }
            }
            let want: Vec<bool> = tampered.iter().map(|t| !t).collect();
            let ok_mb = open(&*sa.mb, &mut by_portable, &seqs);
            let ok_portable = open(&*sa.portable, &mut by_mb, &seqs);
            prop_assert_eq!(&ok_mb, &want, "{}: multi-buffer open", sa.suite);
            prop_assert_eq!(&ok_portable, &want, "{}: portable open", sa.suite);
            let body = 8 + sa.suite.iv_len();
            for i in 0..mine.len() {
                let text_end = plain[i].len() - sa.suite.icv_len();
                if want[i] {
                    prop_assert_eq!(&by_portable[i][body..text_end], &plain[i][body..text_end]);
                    prop_assert_eq!(&by_mb[i][body..text_end], &plain[i][body..text_end]);
                } else {
                    prop_assert!(by_portable[i][body..].iter().all(|&b| b == 0), "failed text zeroed");
                }
            }
        }
    }
}

/// Every suite with a multi-buffer path, at every ICV length and with ESN: a burst of 40
/// packets of growing size where every third is tampered with (ICV, text or header)
/// opens with exactly the others good.
#[test]
fn tampered_packets_fail_alone_in_every_suite() {
    if !multi_buffer_built() {
        return;
    }
    for suite in suites() {
        for esn in [false, true] {
            let s = sa(suite, esn, 3);
            let seqs: Vec<u64> = (0..40).map(|i| (7u64 << 32) + i).collect();
            let mut bufs: Vec<Vec<u8>> = (0..40)
                .map(|i| packet(suite, 0x77, seqs[i], i * 37, i as u8))
                .collect();
            let plain = bufs.clone();
            seal(&*s.mb, &mut bufs, &seqs, &[]);
            for (i, b) in bufs.iter_mut().enumerate() {
                if i % 3 == 1 {
                    let at = [0, b.len() - 1, b.len() / 2][i % 9 / 3];
                    b[at] ^= 0x80;
                }
            }
            let ok = open(&*s.mb, &mut bufs, &seqs);
            for (i, ok) in ok.iter().enumerate() {
                assert_eq!(*ok, i % 3 != 1, "{suite} esn {esn} packet {i}");
                let body = 8 + suite.iv_len();
                let end = plain[i].len() - suite.icv_len();
                if *ok {
                    assert_eq!(bufs[i][body..end], plain[i][body..end], "{suite} {i}");
                }
            }
        }
    }
}

/// AES-GMAC with ESN, whose AAD has the high sequence bits between the SPI and the low
/// half (RFC 4543 §3.3), through the library (the AAD gathered up to 2,048 covered bytes,
/// the incremental GMAC beyond): for each key length, a burst of every size from 0 to
/// 100 bytes of payload, and longer ones on both sides of 2,048 covered bytes, whose sequence
/// numbers cross 2^32 in its middle, seals as the portable transform (aws-lc-rs over the
/// AAD gathered) does, and each opens the other's; opened with the high half one off
/// (the same low halves), every packet fails.
#[test]
fn gmac_with_esn_covers_the_high_sequence_bits_as_the_portable_transform_does() {
    if !multi_buffer_built() {
        return;
    }
    for key_len in [16, 24, 32] {
        let suite = Suite {
            enc: espgw_crypto::Encryption::AesGmac { key_len },
            integ: espgw_crypto::Integrity::None,
        };
        let s = sa(suite, true, 11);
        // Covered bytes: 16 (SPI, sequence number, IV) + the payload and its trailer
        // padded to 4; 2,030 bytes of payload is 2,048 covered, 2,034 is 2,052.
        let sizes: Vec<usize> = (0..=100)
            .chain([127, 128, 129, 500, 1400, 2029, 2030, 2031, 2034, 4000, 9000])
            .collect();
        let seqs: Vec<u64> = (0..sizes.len() as u64)
            .map(|i| (1u64 << 32) - 50 + i)
            .collect();
        assert!(seqs[0] >> 32 == 0 && seqs[seqs.len() - 1] >> 32 == 1);
        let plain: Vec<Vec<u8>> = sizes
            .iter()
            .zip(&seqs)
            .map(|(&n, &q)| packet(suite, 0x4543, q, n, n as u8))
            .collect();
        let mut by_mb = plain.clone();
        let mut by_portable = plain.clone();
        seal(&*s.mb, &mut by_mb, &seqs, &[]);
        seal(&*s.portable, &mut by_portable, &seqs, &[]);
        for (i, (a, b)) in by_mb.iter().zip(&by_portable).enumerate() {
            assert!(
                a == b,
                "AES-{} packet {i} (seq {:#x})",
                key_len * 8,
                seqs[i]
            );
        }
        let all = vec![true; seqs.len()];
        assert_eq!(open(&*s.mb, &mut by_portable.clone(), &seqs), all);
        assert_eq!(open(&*s.portable, &mut by_mb.clone(), &seqs), all);
        let off_by_one_epoch: Vec<u64> = seqs.iter().map(|q| q ^ (1 << 32)).collect();
        assert_eq!(
            open(&*s.mb, &mut by_portable.clone(), &off_by_one_epoch),
            vec![false; seqs.len()],
            "AES-{}: the high half is covered",
            key_len * 8
        );
    }
}
