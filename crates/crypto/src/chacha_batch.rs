//! espgw's own ChaCha20-Poly1305, a burst's packets at once (`csrc/chacha_batch.c`:
//! sixteen ChaCha20 blocks a pass in AVX-512 lanes, whichever packets they belong to, or
//! two passes of eight in AVX2 on a CPU without AVX-512; Poly1305 eight packets at once in
//! AVX-512 IFMA, or two interleaved in 64-bit arithmetic on a CPU without IFMA). intel-ipsec-mb 1.3 runs this AEAD one packet per
//! job, at about the same cost for 48 bytes as for 400; the shim (`csrc/ipsec_mb_shim.c`,
//! `chacha_chunk`) sends a burst's texts of up to 1,024 bytes here (256 without IFMA) and
//! the rest to the library, unless the Rust side took those to aws-lc-rs first
//! (`crate::ipsec_mb::ChaChaLongTexts`, the default where the kernel runs in AVX2). The
//! kernel is used by the default provider (`MbApi::Batch`) where the CPU has AVX-512 F and
//! BW, or AVX2.
//!
//! What the shim relies on, tested here at the kernel's own interface: opening
//! authenticates before it decrypts (a forged packet's text is left as it came, its
//! verdict its own), and sealing writes the same bytes as RFC 8439's AEAD. The ESP-level
//! tests (`tests/chacha_batch.rs`, `tests/esp_kat.rs`) hold the whole path to
//! intel-ipsec-mb, aws-lc-rs and RFC 7634.
#![allow(unsafe_code)]

use std::ffi::c_int;

/// Mirrors `struct espgw_chacha_op` (`csrc/chacha_batch.h`).
#[repr(C)]
#[cfg_attr(not(test), allow(dead_code))]
struct RawChachaOp {
    text: *mut u8,
    len: u32,
    aad_len: u32,
    nonce: *const u8,
    aad: *const u8,
    icv: *const u8,
    tag: *mut u8,
    authentic: i32,
}

extern "C" {
    fn espgw_chacha_batch_isa() -> c_int;
    fn espgw_chacha_batch_text_max() -> u32;
    #[cfg_attr(not(test), allow(dead_code))]
    fn espgw_chacha_batch_using(
        key: *const u8,
        encrypt: c_int,
        ops: *mut RawChachaOp,
        n: u32,
        allow: c_int,
    );
}

/// `ESPGW_CHACHA_USE_IFMA` and `ESPGW_CHACHA_USE_AVX512` (`csrc/chacha_batch.h`): what
/// the kernel may use where the CPU has it too.
#[cfg_attr(not(test), allow(dead_code))]
const USE_IFMA: c_int = 1;
#[cfg_attr(not(test), allow(dead_code))]
const USE_AVX512: c_int = 2;

/// The instructions the kernel runs its ChaCha20 with on this CPU, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Isa {
    /// AVX2: eight blocks a register (`ESPGW_CHACHA_ISA_AVX2`).
    Avx2,
    /// AVX-512 F and BW: sixteen (`ESPGW_CHACHA_ISA_AVX512`).
    Avx512,
}

impl Isa {
    /// As the provider's name shows it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }
}

/// Whether, and with what, this CPU runs the kernel.
pub(crate) fn isa() -> Option<Isa> {
    // SAFETY: reads CPUID only (once; the answer is cached).
    match unsafe { espgw_chacha_batch_isa() } {
        2 => Some(Isa::Avx512),
        1 => Some(Isa::Avx2),
        _ => None,
    }
}

/// The longest text the kernel takes on this CPU (1,024 bytes with AVX-512 IFMA, 256
/// without); the shim sends longer ones elsewhere.
pub(crate) fn text_max() -> usize {
    // SAFETY: reads CPUID only.
    unsafe { espgw_chacha_batch_text_max() as usize }
}

/// Whether this CPU runs the kernel (AVX-512 F and BW, or AVX2).
pub(crate) fn supported() -> bool {
    isa().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One packet for the kernel: text, AAD, nonce, the received ICV and room for the tag.
    struct Packet {
        text: Vec<u8>,
        aad: [u8; 12],
        nonce: [u8; 12],
        icv: [u8; 16],
        tag: [u8; 16],
        authentic: i32,
    }

    fn packet(len: usize, i: u8) -> Packet {
        Packet {
            text: (0..len).map(|b| (b as u8).wrapping_mul(7) ^ i).collect(),
            aad: [i; 12],
            nonce: [i.wrapping_add(1); 12],
            icv: [0; 16],
            tag: [0; 16],
            authentic: -1,
        }
    }

    /// The instruction sets to try, as `espgw_chacha_batch_using` takes them: all the CPU
    /// has (AVX-512 with IFMA here), AVX-512 with the 64-bit Poly1305, and AVX2 with it
    /// (what a CPU without AVX-512 runs).
    const ALLOWS: [c_int; 3] = [USE_AVX512 | USE_IFMA, USE_AVX512, 0];

    /// Runs the kernel over `packets` (AAD of 8 bytes) with what `allow` permits and the
    /// CPU has, and records each verdict.
    fn run(key: &[u8; 32], encrypt: bool, allow: c_int, packets: &mut [Packet]) {
        let mut ops: Vec<RawChachaOp> = packets
            .iter_mut()
            .map(|p| RawChachaOp {
                text: p.text.as_mut_ptr(),
                len: p.text.len() as u32,
                aad_len: 8,
                nonce: p.nonce.as_ptr(),
                aad: p.aad.as_ptr(),
                icv: p.icv.as_ptr(),
                tag: p.tag.as_mut_ptr(),
                authentic: -1,
            })
            .collect();
        // SAFETY: every op points into a packet borrowed for the call: its text (`len`
        // bytes, at most the kernel's 1,024), 8 of its 12 AAD bytes, its 12-byte nonce,
        // its 16-byte ICV and tag; the key has 32 bytes; the CPU runs the kernel (checked
        // by the caller).
        unsafe {
            espgw_chacha_batch_using(
                key.as_ptr(),
                c_int::from(encrypt),
                ops.as_mut_ptr(),
                ops.len() as u32,
                allow,
            )
        };
        for (p, op) in packets.iter_mut().zip(&ops) {
            p.authentic = op.authentic;
        }
    }

    /// Sealed by the kernel, the texts and tags are aws-lc-rs's; opened with one forged
    /// tag (and one forged text) in the burst, those two stay ciphertext and say so, and
    /// the others decrypt to the plaintext. Every instruction set the CPU has: AVX-512 with
    /// IFMA's Poly1305 or the 64-bit one, AVX2 with the 64-bit one.
    #[test]
    fn opening_authenticates_before_decrypting() {
        if !supported() {
            eprintln!("no AVX2 here: the kernel is not used");
            return;
        }
        for allow in ALLOWS {
            seal_and_open(allow);
        }
    }

    fn seal_and_open(allow: c_int) {
        let key = [0x42u8; 32];
        let lens = [
            0usize, 1, 15, 16, 17, 48, 63, 64, 65, 100, 128, 200, 256, 300, 1000, 1024,
        ];
        let mut packets: Vec<Packet> = (0..20)
            .map(|i| packet(lens[i % lens.len()], i as u8))
            .collect();
        let plain = seal_as_aws_lc(&key, allow, &mut packets);
        packets[3].icv[15] ^= 1;
        packets[8].text[0] ^= 1;
        let sealed: Vec<Vec<u8>> = packets.iter().map(|p| p.text.clone()).collect();
        run(&key, false, allow, &mut packets);
        for (i, p) in packets.iter().enumerate() {
            if i == 3 || i == 8 {
                assert_eq!(p.authentic, 0, "packet {i}");
                assert_eq!(p.text, sealed[i], "packet {i}: forged, yet decrypted");
            } else {
                assert_eq!(p.authentic, 1, "packet {i}");
                assert_eq!(p.text, plain[i], "packet {i}");
            }
        }
    }

    /// Every text length from 0 to 1,024 bytes in one burst (so every tail of a block),
    /// then bursts of every size from 1 to 48 of one-block texts (so every count of lanes
    /// a pass ends with, for the one-time keys and for the texts), sealed to aws-lc-rs's
    /// bytes and opened again, with each instruction set the CPU has.
    #[test]
    fn every_length_and_burst_size_with_every_instruction_set() {
        if !supported() {
            return;
        }
        for allow in ALLOWS {
            seal_open_agree(
                allow,
                (0..=1024).map(|len| packet(len, len as u8)).collect(),
            );
            for n in 1..=48u8 {
                seal_open_agree(allow, (0..n).map(|i| packet(64, i ^ n)).collect());
            }
        }
    }

    /// Seals `packets` with the kernel, checks each against aws-lc-rs's seal, opens them
    /// and checks that each comes back authentic and whole.
    fn seal_open_agree(allow: c_int, mut packets: Vec<Packet>) {
        let key = [0x5au8; 32];
        let plain = seal_as_aws_lc(&key, allow, &mut packets);
        run(&key, false, allow, &mut packets);
        for (p, clear) in packets.iter().zip(&plain) {
            assert_eq!((p.authentic, &p.text), (1, clear), "allow {allow}");
        }
    }

    /// Seals `packets` with the kernel and checks each text and tag against aws-lc-rs's
    /// seal of the same plaintext; each packet's ICV is then its tag, ready to open.
    /// Returns the plaintexts.
    fn seal_as_aws_lc(key: &[u8; 32], allow: c_int, packets: &mut [Packet]) -> Vec<Vec<u8>> {
        use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305};
        let lc = LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, key).unwrap());
        let plain: Vec<Vec<u8>> = packets.iter().map(|p| p.text.clone()).collect();
        run(key, true, allow, packets);
        for (i, (p, clear)) in packets.iter_mut().zip(&plain).enumerate() {
            let mut want = clear.clone();
            let tag = lc
                .seal_in_place_separate_tag(
                    Nonce::assume_unique_for_key(p.nonce),
                    Aad::from(&p.aad[..8]),
                    &mut want,
                )
                .unwrap();
            let at = format!(
                "packet {i} of {}, {} bytes, allow {allow}",
                plain.len(),
                clear.len()
            );
            assert_eq!(p.text, want, "{at}");
            assert_eq!(&p.tag[..], tag.as_ref(), "{at}");
            p.icv = p.tag;
        }
        plain
    }

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Seals one text with the kernel: (ciphertext, tag).
    fn seal_one(
        key: &[u8],
        nonce: &[u8],
        aad: &[u8],
        text: &[u8],
        allow: c_int,
    ) -> (Vec<u8>, Vec<u8>) {
        let mut ct = text.to_vec();
        let mut tag = [0u8; 16];
        let mut op = RawChachaOp {
            text: ct.as_mut_ptr(),
            len: ct.len() as u32,
            aad_len: aad.len() as u32,
            nonce: nonce.as_ptr(),
            aad: aad.as_ptr(),
            icv: tag.as_ptr(),
            tag: tag.as_mut_ptr(),
            authentic: -1,
        };
        assert!(key.len() == 32 && nonce.len() == 12 && aad.len() <= 16 && text.len() <= 1024);
        // SAFETY: the op points at `ct` (its length), `aad` (its length, at most 16), the
        // 12-byte nonce and the 16-byte `tag` (read as the ICV only when opening); the key
        // has 32 bytes; the CPU runs the kernel (checked by the caller).
        unsafe { espgw_chacha_batch_using(key.as_ptr(), 1, &mut op, 1, allow) };
        (ct, tag.to_vec())
    }

    /// RFC 8439 §2.8.2's AEAD example (12 bytes of AAD, 114 of text), and Wycheproof's
    /// case 2 (no AAD, no text: the tag over the lengths block alone), with every
    /// instruction set the CPU has.
    #[test]
    fn rfc8439_vectors() {
        if !supported() {
            return;
        }
        let cases = [
            (
                "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f",
                "070000004041424344454647",
                "50515253c0c1c2c3c4c5c6c7",
                "4c616469657320616e642047656e746c656d656e206f662074686520636c617373206f66202739393a204966204920636f756c64206f6666657220796f75206f6e6c79206f6e652074697020666f7220746865206675747572652c2073756e73637265656e20776f756c642062652069742e",
                "d31a8d34648e60db7b86afbc53ef7ec2a4aded51296e08fea9e2b5a736ee62d63dbea45e8ca9671282fafb69da92728b1a71de0a9e060b2905d6a5b67ecd3b3692ddbd7f2d778b8c9803aee328091b58fab324e4fad675945585808b4831d7bc3ff4def08e4b7a9de576d26586cec64b6116",
                "1ae10b594f09e26a7e902ecbd0600691",
            ),
            (
                "80ba3192c803ce965ea371d5ff073cf0f43b6a2ab576b208426e11409c09b9b0",
                "4da5bf8dfd5852c1ea12379d",
                "",
                "",
                "",
                "76acb342cf3166a5b63c0c0ea1383c8d",
            ),
        ];
        for allow in ALLOWS {
            for (key, nonce, aad, text, ct, tag) in cases {
                let (got_ct, got_tag) =
                    seal_one(&unhex(key), &unhex(nonce), &unhex(aad), &unhex(text), allow);
                assert_eq!(got_ct, unhex(ct), "allow {allow}");
                assert_eq!(got_tag, unhex(tag), "allow {allow}");
            }
        }
    }
}
