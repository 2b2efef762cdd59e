//! Python's `random.Random` as far as `seed(int)` and `shuffle` go: MT19937 seeded the way
//! CPython seeds it, and CPython's shuffle, which draws each index by rejection from
//! `getrandbits`.
//!
//! Why: `../shared/bench/dpdk-secgw/gen_pcap.py` writes ipsec-secgw's IMIX pcap in the order
//! `random.Random(42).shuffle` gives, and a side-by-side comparison must offer both
//! gateways the same frames in the same order (the order decides how sizes mix within a
//! burst, and so how well the branch predictor does). With this, `bench dataplane`'s IMIX
//! is that order exactly (see [`crate::gen::imix_sizes`]).

/// The Mersenne Twister MT19937 (Matsumoto and Nishimura, 1998), 32-bit outputs.
pub struct Mt19937 {
    state: [u32; N],
    next: usize,
}

const N: usize = 624;
const M: usize = 397;

impl Mt19937 {
    /// Seeded as CPython's `random.Random(seed)` for a non-negative integer `seed`: the
    /// integer's 32-bit words, least significant first, through `init_by_array`.
    pub fn python_seed(seed: u64) -> Self {
        let key: Vec<u32> = if seed >> 32 == 0 {
            vec![seed as u32]
        } else {
            vec![seed as u32, (seed >> 32) as u32]
        };
        Self::init_by_array(&key)
    }

    fn init_genrand(s: u32) -> Self {
        let mut state = [0u32; N];
        state[0] = s;
        for i in 1..N {
            let prev = state[i - 1];
            state[i] = 1_812_433_253u32
                .wrapping_mul(prev ^ (prev >> 30))
                .wrapping_add(i as u32);
        }
        Mt19937 { state, next: N }
    }

    fn init_by_array(key: &[u32]) -> Self {
        let mut g = Self::init_genrand(19_650_218);
        let mt = &mut g.state;
        let (mut i, mut j) = (1usize, 0usize);
        for _ in 0..N.max(key.len()) {
            let prev = mt[i - 1];
            mt[i] = (mt[i] ^ (prev ^ (prev >> 30)).wrapping_mul(1_664_525))
                .wrapping_add(key[j])
                .wrapping_add(j as u32);
            i += 1;
            j += 1;
            if i >= N {
                mt[0] = mt[N - 1];
                i = 1;
            }
            if j >= key.len() {
                j = 0;
            }
        }
        for _ in 0..N - 1 {
            let prev = mt[i - 1];
            mt[i] =
                (mt[i] ^ (prev ^ (prev >> 30)).wrapping_mul(1_566_083_941)).wrapping_sub(i as u32);
            i += 1;
            if i >= N {
                mt[0] = mt[N - 1];
                i = 1;
            }
        }
        mt[0] = 0x8000_0000;
        g
    }

    fn twist(&mut self) {
        for i in 0..N {
            let y = (self.state[i] & 0x8000_0000) | (self.state[(i + 1) % N] & 0x7fff_ffff);
            let mut v = self.state[(i + M) % N] ^ (y >> 1);
            if y & 1 != 0 {
                v ^= 0x9908_b0df;
            }
            self.state[i] = v;
        }
        self.next = 0;
    }

    /// The next 32-bit output (CPython's `genrand_uint32`).
    pub fn next_u32(&mut self) -> u32 {
        if self.next >= N {
            self.twist();
        }
        let mut y = self.state[self.next];
        self.next += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// `getrandbits(k)` for 1 <= k <= 32: the top `k` bits of one output.
    fn bits(&mut self, k: u32) -> u32 {
        self.next_u32() >> (32 - k)
    }

    /// `_randbelow(n)` for 1 <= n < 2^32: `n.bit_length()` bits, drawn again while the
    /// number is not below `n`.
    fn below(&mut self, n: u32) -> u32 {
        let k = 32 - n.leading_zeros();
        loop {
            let r = self.bits(k);
            if r < n {
                return r;
            }
        }
    }

    /// `shuffle(v)`: from the last index down to 1, swapped with an index drawn below it
    /// (inclusive).
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u32 + 1) as usize;
            v.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The expected values are CPython 3.11's, from /usr/bin/python3:
    //   r = random.Random(42); [r.getrandbits(32) for _ in range(3)]
    #[test]
    fn outputs_match_cpython() {
        let mut g = Mt19937::python_seed(42);
        let got: Vec<u32> = (0..3).map(|_| g.next_u32()).collect();
        assert_eq!(got, [2_746_317_213, 478_163_327, 107_420_369]);
    }

    //   x = list(range(10)); random.Random(7).shuffle(x); x
    #[test]
    fn shuffle_matches_cpython() {
        let mut v: Vec<u32> = (0..10).collect();
        Mt19937::python_seed(7).shuffle(&mut v);
        assert_eq!(v, [8, 3, 1, 4, 7, 0, 9, 6, 2, 5]);
    }

    // Past one twist of the state (624 outputs), and a seed of two words:
    //   r = random.Random(2**40 + 5); [r.getrandbits(32) for _ in range(700)][-2:]
    #[test]
    fn later_outputs_and_wide_seeds_match_cpython() {
        let mut g = Mt19937::python_seed((1 << 40) + 5);
        let got: Vec<u32> = (0..700).map(|_| g.next_u32()).skip(698).collect();
        assert_eq!(got, [3_041_355_596, 3_200_142_176]);
    }
}
