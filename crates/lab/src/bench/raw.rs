//! The crypto-only references `bench dataplane` sets each pipeline figure against, on the
//! same packet sizes and bursts of 64: what the library alone does, without the pipeline.
//!
//! - [`raw_suite`]: the suite's own ESP transform (IV, cipher, ICV) sealing ESP packets,
//!   or AH's ICV over the packet: the ceiling for that suite, so `pipeline / raw` says how
//!   much of the time the pipeline itself takes;
//! - [`raw_seal`]: AES-GCM alone (the figure the published comparison quotes).

use std::hint::black_box;
use std::time::{Duration, Instant};

use espgw_config::SaProto;
use espgw_crypto::{
    esp_key, AeadAlgorithm, AeadOp, AhKey, AhOp, CryptoProvider, EspOp, Icv, Suite,
};

use super::zeroize_free::key_of;

/// Runs `go` (which returns how many operations it did) for `secs` after a warm-up and
/// returns operations per second.
fn rate(secs: f64, mut go: impl FnMut() -> u64) -> f64 {
    for _ in 0..50 {
        go();
    }
    let start = Instant::now();
    let mut ops = 0u64;
    while start.elapsed() < Duration::from_secs_f64(secs) {
        for _ in 0..16 {
            ops += go();
        }
    }
    ops as f64 / start.elapsed().as_secs_f64()
}

/// Raw rate of `suite` on packets whose inner packets are `inner_lens` bytes: ESP packets
/// sealed a burst of `burst` at a time through `provider`'s transform (with ESN when
/// `esn`, sequence numbers from 2^32), or AH ICVs over the packet, a burst at a time
/// through `provider`'s AH key (ESN or not, the same ICV over four more bytes).
pub(super) fn raw_suite(
    provider: &dyn CryptoProvider,
    proto: SaProto,
    suite: Suite,
    esn: bool,
    inner_lens: &[usize],
    burst: usize,
    secs: f64,
) -> Result<f64, String> {
    let n = inner_lens.len().max(burst);
    match proto {
        SaProto::Esp => {
            let key = esp_key(
                provider,
                suite,
                &key_of(suite.enc.key_material_len()),
                &key_of(suite.integ.key_len()),
                esn,
            )
            .map_err(|e| e.to_string())?;
            let block = suite.enc.block_len();
            let mut bufs: Vec<Vec<u8>> = (0..n)
                .map(|i| {
                    let inner = inner_lens[i % inner_lens.len()];
                    let text = inner + espgw_wire::esp::pad_len(inner, block) + 2;
                    vec![0x5a; 8 + suite.iv_len() + text + suite.icv_len()]
                })
                .collect();
            let mut seq = if esn { 1 << 32 } else { 0 };
            let r = rate(secs, || {
                for chunk in bufs.chunks_mut(burst) {
                    let mut ops: Vec<EspOp<'_>> = chunk
                        .iter_mut()
                        .map(|b| {
                            seq += 1;
                            EspOp { esp: b, seq }
                        })
                        .collect();
                    key.seal_burst(&mut ops);
                }
                n as u64
            });
            black_box(&bufs);
            Ok(r)
        }
        SaProto::Ah => {
            let key = AhKey::with_provider(provider, suite.integ, &key_of(suite.integ.key_len()))
                .map_err(|e| e.to_string())?;
            // Outer IPv4 header, AH header (with GMAC's IV) and ICV around the inner
            // packet: what the pipeline lays out for each packet's ICV.
            let mut bufs: Vec<Vec<u8>> = (0..n)
                .map(|i| {
                    let inner = inner_lens[i % inner_lens.len()];
                    vec![0x5a; 20 + 12 + key.iv_len() + key.icv_len() + inner]
                })
                .collect();
            let mut icvs = vec![Icv::NONE; burst];
            let r = rate(secs, || {
                for chunk in bufs.chunks_mut(burst) {
                    let mut ops: Vec<AhOp<'_>> = chunk
                        .iter_mut()
                        .zip(icvs.iter_mut())
                        .map(|(text, icv)| AhOp {
                            text,
                            iv: [0; 8],
                            icv,
                        })
                        .collect();
                    key.tag_burst(&mut ops);
                    black_box(&ops);
                }
                n as u64
            });
            Ok(r)
        }
    }
}

/// Raw AEAD seal throughput on buffers of the given text lengths, bursts of `burst`.
pub(super) fn raw_seal(
    provider: &dyn CryptoProvider,
    alg: AeadAlgorithm,
    lens: &[usize],
    burst: usize,
    secs: f64,
) -> Result<f64, String> {
    let key = provider
        .aead_key(alg, &key_of(alg.key_len()), 16)
        .map_err(|e| e.to_string())?;
    let n = lens.len().max(burst);
    let mut bufs: Vec<Vec<u8>> = (0..n)
        .map(|i| vec![0x5a; lens[i % lens.len()] + 16])
        .collect();
    let mut seq = 0u64;
    let mut go = |bufs: &mut Vec<Vec<u8>>| {
        for chunk in bufs.chunks_mut(burst) {
            let mut ops: Vec<AeadOp<'_>> = chunk
                .iter_mut()
                .map(|b| {
                    seq += 1;
                    let mut nonce = [0u8; 12];
                    nonce[4..].copy_from_slice(&seq.to_be_bytes());
                    AeadOp {
                        nonce,
                        aad: [1; 12],
                        aad_len: 8,
                        buf: &mut b[..],
                    }
                })
                .collect();
            key.seal_burst(&mut ops);
        }
        n as u64
    };
    let r = rate(secs, || go(&mut bufs));
    black_box(&bufs);
    Ok(r)
}
