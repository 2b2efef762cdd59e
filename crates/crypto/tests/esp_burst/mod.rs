//! ESP bursts for the integration tests that run one through both back-ends
//! (`multi_buffer.rs`, `own_instance.rs`, `sha_extensions.rs`, and the batch kernels'
//! `gcm_batch.rs` and `chacha_batch.rs`): packets laid out per suite, sealing and opening a
//! burst, one SA's key through each path and the check that the paths agree, whether
//! intel-ipsec-mb is built in; and AH's ICVs over a burst (`ah_burst.rs`,
//! `sha_extensions.rs`). (Not in `common/`, which the crate's
//! own unit tests include too, where `espgw_crypto` is not an outside crate.)
//! Not every test binary uses every helper.

use std::sync::Arc;

use espgw_crypto::{esp_key, provider, AhKey, AhOp, EspKey, EspOp, Icv, ProviderChoice, Suite};

/// Whether intel-ipsec-mb is built in; only a build that opted out may lack it.
#[allow(dead_code)]
pub fn multi_buffer_built() -> bool {
    match provider(ProviderChoice::IpsecMb) {
        Ok(_) => true,
        Err(e) => {
            // Only a build that opted out may lack it; the CI build has it.
            assert!(
                std::env::var_os("ESPGW_NO_IPSEC_MB").is_some(),
                "intel-ipsec-mb missing: {e}"
            );
            false
        }
    }
}

/// An ESP packet of `payload` text bytes (before padding) laid out for `suite`.
#[allow(dead_code)]
pub fn packet(suite: Suite, spi: u32, seq: u64, payload: usize, fill: u8) -> Vec<u8> {
    let text = (payload + 2).div_ceil(suite.block_len()) * suite.block_len();
    let mut esp = vec![0u8; 8 + suite.iv_len() + text + suite.icv_len()];
    esp[..4].copy_from_slice(&spi.to_be_bytes());
    esp[4..8].copy_from_slice(&(seq as u32).to_be_bytes());
    for (i, b) in esp[8 + suite.iv_len()..][..text].iter_mut().enumerate() {
        *b = fill.wrapping_add(i as u8);
    }
    esp
}

#[allow(dead_code)]
pub fn seal(key: &dyn EspKey, bufs: &mut [Vec<u8>], seqs: &[u64], ivs: &[[u8; 16]]) {
    let mut ops: Vec<EspOp<'_>> = bufs
        .iter_mut()
        .zip(seqs)
        .map(|(b, &seq)| EspOp { esp: b, seq })
        .collect();
    key.seal_burst_ivs(&mut ops, ivs);
}

#[allow(dead_code)]
pub fn open(key: &dyn EspKey, bufs: &mut [Vec<u8>], seqs: &[u64]) -> Vec<bool> {
    let mut ok = vec![false; bufs.len()];
    let mut ops: Vec<EspOp<'_>> = bufs
        .iter_mut()
        .zip(seqs)
        .map(|(b, &seq)| EspOp { esp: b, seq })
        .collect();
    key.open_burst(&mut ops, &mut ok);
    ok
}

/// One SA's key through each path: (name, key): intel-ipsec-mb with espgw's batch
/// kernels (`batch`), the library alone (`direct`) and aws-lc-rs.
#[allow(dead_code)]
pub fn keys(suite: Suite, esn: bool, seed: u8) -> Vec<(&'static str, Arc<dyn EspKey>)> {
    let enc: Vec<u8> = (0..suite.enc.key_material_len())
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect();
    [
        ("batch", ProviderChoice::IpsecMb),
        ("direct", ProviderChoice::IpsecMbDirect),
        ("aws-lc", ProviderChoice::AwsLc),
    ]
    .into_iter()
    .map(|(name, choice)| {
        let p = provider(choice).unwrap();
        (name, esp_key(&*p, suite, &enc, &[], esn).unwrap())
    })
    .collect()
}

/// Seals `payloads` with every path (same sequence numbers), checks the bytes agree, then
/// tampers with the packets `tamper` names and has every path open every path's burst.
#[allow(dead_code)]
pub fn agree(
    suite: Suite,
    esn: bool,
    seed: u8,
    payloads: &[(usize, u8)],
    tamper: &[Option<usize>],
) {
    let keys = keys(suite, esn, seed);
    let seqs: Vec<u64> = (0..payloads.len() as u64)
        .map(|i| (u64::from(seed) << 31) + 1 + i)
        .collect();
    let plain: Vec<Vec<u8>> = payloads
        .iter()
        .zip(&seqs)
        .map(|(&(len, fill), &s)| packet(suite, 0x5150, s, len, fill))
        .collect();
    let ivs = vec![[0u8; 16]; plain.len()];
    let sealed: Vec<Vec<Vec<u8>>> = keys
        .iter()
        .map(|(_, k)| {
            let mut b = plain.clone();
            seal(&**k, &mut b, &seqs, &ivs);
            b
        })
        .collect();
    for (i, p) in plain.iter().enumerate() {
        let text = p.len() - 16 - suite.icv_len();
        for (k, (name, _)) in keys.iter().enumerate().skip(1) {
            assert!(
                sealed[0][i] == sealed[k][i],
                "{suite} esn {esn}: packet {i} ({text} bytes of text) sealed by batch and {name} differ"
            );
        }
        assert_ne!(
            sealed[0][i][16..],
            p[16..],
            "{suite}: packet {i} left in clear"
        );
    }
    let want: Vec<bool> = tamper.iter().map(Option::is_none).collect();
    for (by, (sealer, _)) in sealed.iter().zip(&keys) {
        let mut bad = by.clone();
        for (b, t) in bad.iter_mut().zip(tamper) {
            if let Some(at) = t {
                let at = at % b.len();
                b[at] ^= 0x80;
            }
        }
        for (opener, k) in &keys {
            let mut bufs = bad.clone();
            let ok = open(&**k, &mut bufs, &seqs);
            assert_eq!(
                ok, want,
                "{suite} esn {esn}: {opener} opening {sealer}'s burst"
            );
            for (i, b) in bufs.iter().enumerate() {
                let end = b.len() - suite.icv_len();
                if want[i] {
                    assert_eq!(b[16..end], plain[i][16..end], "{opener}: packet {i} text");
                } else {
                    assert!(
                        b[16..].iter().all(|&x| x == 0),
                        "{opener}: packet {i} zeroed"
                    );
                }
            }
        }
    }
}

/// [`agree`] over a generated burst: each packet's payload length, fill byte and the byte
/// to tamper with, if any.
#[allow(dead_code)]
pub fn agree_burst(suite: Suite, esn: bool, seed: u8, burst: &[(usize, u8, Option<usize>)]) {
    let payloads: Vec<(usize, u8)> = burst.iter().map(|&(l, f, _)| (l, f)).collect();
    let tamper: Vec<Option<usize>> = burst.iter().map(|&(_, _, t)| t).collect();
    agree(suite, esn, seed, &payloads, &tamper);
}

/// The ICVs `key` computes for `texts` in one burst (with `ivs` for GMAC), each checked
/// to have the key's length, the texts checked unchanged.
#[allow(dead_code)]
pub fn ah_icvs(key: &AhKey, texts: &[Vec<u8>], ivs: &[[u8; 8]]) -> Vec<Option<Vec<u8>>> {
    let mut copies: Vec<Vec<u8>> = texts.to_vec();
    // Stale ICVs in the slots: every op must overwrite or clear its own.
    let mut icvs = vec![Icv::NONE; texts.len()];
    for icv in &mut icvs {
        icv.set(&[0xee; 12]);
    }
    let mut ops: Vec<AhOp<'_>> = copies
        .iter_mut()
        .zip(ivs)
        .zip(icvs.iter_mut())
        .map(|((text, iv), icv)| AhOp { text, iv: *iv, icv })
        .collect();
    key.tag_burst(&mut ops);
    drop(ops);
    let out = icvs
        .iter()
        .map(|icv| {
            let got = icv.get().map(<[u8]>::to_vec);
            if let Some(g) = &got {
                assert_eq!(g.len(), key.icv_len(), "{:?}", key.integrity());
            }
            got
        })
        .collect();
    assert_eq!(copies, texts, "the texts are read, never written");
    out
}
