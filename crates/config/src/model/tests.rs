use super::*;

#[test]
fn prefix_contains() {
    let p = Prefix {
        addr: "198.51.100.0".parse().unwrap(),
        len: 24,
    };
    assert!(p.contains("198.51.100.77".parse().unwrap()));
    assert!(!p.contains("198.51.101.1".parse().unwrap()));
    assert!(!p.contains("2001:db8::1".parse().unwrap()));
    let any = Prefix::any_v6();
    assert!(any.contains("2001:db8::1".parse().unwrap()));
    let h = Prefix::host("2001:db8::1".parse().unwrap());
    assert!(h.contains("2001:db8::1".parse().unwrap()));
    assert!(!h.contains("2001:db8::2".parse().unwrap()));
    assert_eq!(mask(32, 24), 0xffff_ff00);
    assert_eq!(mask(128, 128), u128::MAX);
    assert_eq!(mask(128, 1), 1u128 << 127);
}
