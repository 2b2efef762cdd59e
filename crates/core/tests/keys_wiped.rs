//! No key is left behind in freed memory by loading a configuration and building the data
//! plane's tables from it (each SA's key handed to every crypto back-end built, its key
//! schedule made) and dropping both, nor by an IKE daemon's ADD_SA frame encoded, split
//! from a stream and decoded (the keying protocol's path into the gateway): every block
//! the process frees meanwhile is searched,
//! before it goes back to the allocator, for the key as text (hex, and colon-separated as
//! in DPDK's syntax) and as bytes. Blocks a reallocation leaves behind are searched too
//! (a growing buffer's old copy is the classic leak).
//!
//! Every block is zeroed as it is freed, after the search, so that stale bytes in
//! recycled memory cannot be mistaken for a copy the loader made.
//!
//! One test function: the harness's other threads would otherwise allocate and free
//! concurrently (harmless, since they never hold the key, but one function keeps the count
//! about this file's work alone).

// The allocator hook is this test's only `unsafe`: the boundary with the system allocator,
// which nothing but a `GlobalAlloc` can watch. The library itself forbids `unsafe`.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use espgw_config::{load_with, CryptoPolicy, Format, DEFAULT_CONFIG};
use espgw_core::tables::Tables;
use zeroize::Zeroize;

/// The key (16 bytes, then the 4-byte salt) and what it looks like in each format.
const KEY_HEX: &str = "a73c91e45b08f26d1ec974b30a58df269b41c60e";
const KEY_BYTES: [u8; 8] = [0xa7, 0x3c, 0x91, 0xe4, 0x5b, 0x08, 0xf2, 0x6d];
const NEEDLES: [&[u8]; 3] = [b"a73c91e45b08f26d", b"a7:3c:91:e4:5b:08:f2:6d", &KEY_BYTES];

static SEARCHING: AtomicBool = AtomicBool::new(false);
static FOUND: [AtomicUsize; 3] = [
    AtomicUsize::new(0),
    AtomicUsize::new(0),
    AtomicUsize::new(0),
];

/// The system allocator, searching each block it is handed back while `SEARCHING`.
struct Searching;

fn search(block: &[u8]) {
    for (n, needle) in NEEDLES.iter().enumerate() {
        if block.windows(needle.len()).any(|w| w == *needle) {
            FOUND[n].fetch_add(1, Ordering::Relaxed);
        }
    }
}

// SAFETY: every method forwards to `System` with the layout it was given. The block
// searched and zeroed on `dealloc` is the caller's live allocation of `layout.size()`
// bytes, read and written before it is freed; `realloc` moves the contents itself
// (`System.alloc`, a copy of the smaller size, then the old block searched, zeroed and
// freed), so that the block a reallocation leaves behind is searched as well.
unsafe impl GlobalAlloc for Searching {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: see above.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if SEARCHING.load(Ordering::Relaxed) {
            // SAFETY: `ptr` is a live block of `layout.size()` bytes (GlobalAlloc contract).
            search(unsafe { std::slice::from_raw_parts(ptr, layout.size()) });
        }
        // Every block is zeroed as it is freed (searched first): a later block handed out
        // over one freed unwiped before the search began (the test's own copies of the
        // text) would otherwise carry the key in its uninitialised tail into the search.
        // Volatile writes (`zeroize`): a plain store before `free` is dead to the compiler.
        // SAFETY: as above; the block is still the caller's until `System.dealloc`.
        unsafe {
            std::slice::from_raw_parts_mut(ptr, layout.size()).zeroize();
            System.dealloc(ptr, layout)
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `new_size` is non-zero and valid with `layout.align()` (GlobalAlloc
        // contract); the copy stays within both blocks.
        unsafe {
            let new = System.alloc(Layout::from_size_align_unchecked(new_size, layout.align()));
            if !new.is_null() {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            new
        }
    }
}

#[global_allocator]
static ALLOC: Searching = Searching;

fn native() -> String {
    let mut text = DEFAULT_CONFIG.replacen(
        "0x000102030405060708090a0b0c0d0e0fcafe0001",
        &format!("0x{KEY_HEX}"),
        1,
    );
    assert!(text.contains(KEY_HEX));
    text.push('\n');
    text
}

fn secgw() -> String {
    let colons: Vec<String> = (0..KEY_HEX.len() / 2)
        .map(|i| KEY_HEX[2 * i..2 * i + 2].to_string())
        .collect();
    format!(
        "sp ipv4 out esp protect 1005 pri 1 dst 203.0.113.0/24 sport 0:65535 dport 0:65535\n\
         sa out 1005 aead_algo aes-128-gcm aead_key {} \\\n\
         mode ipv4-tunnel src 192.0.2.1 dst 192.0.2.2\n\
         rt ipv4 dst 192.0.2.2/32 port 1\n",
        colons.join(":")
    )
}

fn setkey() -> String {
    format!(
        "add 192.0.2.1 192.0.2.2 esp 0x1000 -m tunnel\n\
         -E aes-gcm-16 0x{KEY_HEX};\n\
         spdadd 198.51.100.0/24 203.0.113.0/24 any -P out ipsec\n\
         esp/tunnel/192.0.2.1-192.0.2.2/require;\n"
    )
}

#[test]
fn loading_a_configuration_leaves_no_key_in_freed_memory() {
    let dir = std::env::temp_dir().join(format!("espgw-keys-wiped-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The search works: a block holding the key, freed unwiped, is found (so the zeros
    // below mean something), and one grown by reallocation leaves its old copy found too.
    SEARCHING.store(true, Ordering::SeqCst);
    drop(std::hint::black_box(KEY_HEX.as_bytes().to_vec()));
    let mut grown = std::hint::black_box(KEY_BYTES.to_vec());
    grown.reserve(4096);
    std::hint::black_box(&grown);
    SEARCHING.store(false, Ordering::SeqCst);
    assert_eq!(FOUND[0].load(Ordering::Relaxed), 1);
    assert_eq!(FOUND[2].load(Ordering::Relaxed), 1);
    drop(grown);
    for (format, text) in [
        (Format::Native, native()),
        (Format::Secgw, secgw()),
        (Format::Setkey, setkey()),
    ] {
        let path = dir.join("gw.conf");
        std::fs::write(&path, &text).unwrap();
        drop(text); // the test's own copy: not the loader's doing
        for f in &FOUND {
            f.store(0, Ordering::Relaxed);
        }
        SEARCHING.store(true, Ordering::SeqCst);
        let cfg = load_with(&path, Some(format), CryptoPolicy::default());
        let loaded = cfg.as_ref().map(|c| c.sas.len()).map_err(|e| e.to_string());
        if let Ok(cfg) = &cfg {
            for provider in espgw_crypto::all_providers() {
                let tables = Tables::build(cfg, provider.as_ref(), None);
                assert!(tables.is_ok(), "{format:?}, {}", provider.name());
            }
        }
        drop(cfg);
        SEARCHING.store(false, Ordering::SeqCst);
        assert!(matches!(loaded, Ok(n) if n >= 1), "{format:?}: {loaded:?}");
        let found: Vec<usize> = FOUND.iter().map(|f| f.load(Ordering::Relaxed)).collect();
        assert_eq!(
            found,
            [0, 0, 0],
            "{format:?}: freed blocks holding the key (hex, colon-separated, bytes)"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();

    keying_frames_leave_no_key_in_freed_memory();
}

/// An ADD_SA request as charon's plugin sends it (several selectors, so the frame outgrows
/// its first buffer), encoded, split from a byte stream and decoded, all dropped.
fn keying_frames_leave_no_key_in_freed_memory() {
    use espgw_keying::frame::split;
    use espgw_keying::message::{AddSa, Lifetimes, Proto, SaId, SaMode, TrafficSelector};
    use espgw_keying::{Message, Request};

    let key: Vec<u8> = (0..KEY_HEX.len() / 2)
        .map(|i| u8::from_str_radix(&KEY_HEX[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let ts = |from: &str, to: &str| TrafficSelector {
        proto: 0,
        from: from.parse().unwrap(),
        to: to.parse().unwrap(),
        from_port: 0,
        to_port: 65535,
    };
    let add = AddSa {
        id: SaId {
            src: "192.0.2.2".parse().unwrap(),
            dst: "192.0.2.1".parse().unwrap(),
            spi: 0xc001_d00d,
            proto: Proto::Esp,
        },
        reqid: 7,
        mode: SaMode::Tunnel,
        enc_alg: 20,
        enc_key: zeroize::Zeroizing::new(key),
        int_alg: 0,
        int_key: zeroize::Zeroizing::new(Vec::new()),
        replay_window: 1024,
        encap: None,
        esn: true,
        inbound: true,
        lifetime: Lifetimes {
            soft_bytes: 1,
            hard_bytes: 2,
            soft_packets: 3,
            hard_packets: 4,
            soft_seconds: 5,
            hard_seconds: 6,
        },
        src_ts: (0..8)
            .map(|i| ts(&format!("2001:db8:{i}::"), &format!("2001:db8:{i}::ffff")))
            .collect(),
        dst_ts: vec![ts("203.0.113.0", "203.0.113.127")],
    };
    for f in &FOUND {
        f.store(0, Ordering::Relaxed);
    }
    SEARCHING.store(true, Ordering::SeqCst);
    let message = Message::Request(3, Request::AddSa(Box::new(add)));
    let frame = message.encode().unwrap();
    drop(message);
    let decoded = match split(&frame) {
        Ok(Some((raw, used))) => (used == frame.len()).then(|| Message::decode(&raw)),
        _ => None,
    };
    let took_key = matches!(
        &decoded,
        Some(Ok(Message::Request(3, Request::AddSa(a)))) if a.enc_key.len() == 20
    );
    let frame_len = frame.len();
    drop(decoded);
    drop(frame);
    SEARCHING.store(false, Ordering::SeqCst);
    assert!(took_key);
    assert!(
        frame_len > 256,
        "the frame must outgrow the encoder's first buffer"
    );
    let found: Vec<usize> = FOUND.iter().map(|f| f.load(Ordering::Relaxed)).collect();
    assert_eq!(found, [0, 0, 0], "ADD_SA: freed blocks holding the key");
}
