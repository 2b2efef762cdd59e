//! ESP bursts for the integration tests that run one through both back-ends
//! (`multi_buffer.rs`, `own_instance.rs`): packets laid out per suite, sealing and opening
//! a burst, and whether intel-ipsec-mb is built in. (Not in `common/`, which the crate's
//! own unit tests include too, where `espgw_crypto` is not an outside crate.)
//! Not every test binary uses every helper.

use espgw_crypto::{provider, EspKey, EspOp, ProviderChoice, Suite};

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
