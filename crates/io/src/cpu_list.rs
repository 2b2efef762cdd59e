//! CPU lists as the kernel and `taskset -c` write them ("0-3,8,10-11"), for pinning
//! workers and tester threads to named cores.

/// The highest CPU number a list may name: the kernel's own limit (`CONFIG_NR_CPUS`) is
/// at most 8192, and a bound keeps "0-4000000000" from allocating without end.
pub const MAX_CPU: usize = 8191;

/// A parsed CPU list (for command-line options: `"2-5".parse::<CpuList>()`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

impl std::str::FromStr for CpuList {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_cpu_list(s).map(CpuList)
    }
}

impl std::fmt::Display for CpuList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&format_cpu_list(&self.0))
    }
}

/// Parses a CPU list: comma-separated CPUs and inclusive ranges, in the order given, each
/// CPU once. The order matters: worker (or thread) i goes to the i-th CPU.
pub fn parse_cpu_list(text: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in text.split(',').map(str::trim) {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (cpu_number(a)?, cpu_number(b)?),
            None => {
                let c = cpu_number(part)?;
                (c, c)
            }
        };
        if first > last {
            return Err(format!("'{part}': a range goes from low to high"));
        }
        for c in first..=last {
            if cpus.contains(&c) {
                return Err(format!("CPU {c} is named twice"));
            }
            cpus.push(c);
        }
    }
    Ok(cpus)
}

fn cpu_number(s: &str) -> Result<usize, String> {
    let s = s.trim();
    match s.parse::<usize>() {
        Ok(c) if c <= MAX_CPU => Ok(c),
        Ok(_) => Err(format!("CPU {s} is above {MAX_CPU}")),
        Err(_) => Err(format!("'{s}' is not a CPU number")),
    }
}

/// Writes a CPU list back in the short form: runs of consecutive CPUs as ranges.
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if j == i {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_ranges_keep_their_order() {
        assert_eq!(parse_cpu_list("3").unwrap(), vec![3]);
        assert_eq!(parse_cpu_list("1-4").unwrap(), vec![1, 2, 3, 4]);
        assert_eq!(parse_cpu_list("8,2-3, 5").unwrap(), vec![8, 2, 3, 5]);
        assert_eq!(parse_cpu_list("7-7").unwrap(), vec![7]);
    }

    #[test]
    fn bad_lists_say_what_is_wrong() {
        for (text, says) in [
            ("", "not a CPU number"),
            ("1,,2", "not a CPU number"),
            ("a-3", "not a CPU number"),
            ("-1", "not a CPU number"),
            ("5-2", "low to high"),
            ("1,2,1", "named twice"),
            ("0-3,2", "named twice"),
            ("0-4000000000", "above 8191"),
            ("99999999999999999999999", "not a CPU number"),
        ] {
            let e = parse_cpu_list(text).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }

    #[test]
    fn the_short_form_reads_back_the_same() {
        assert_eq!(format_cpu_list(&[1, 2, 3, 4]), "1-4");
        assert_eq!(format_cpu_list(&[9, 10, 11, 12, 13, 14, 15, 16]), "9-16");
        assert_eq!(format_cpu_list(&[0, 2, 3, 7]), "0,2-3,7");
        assert_eq!(format_cpu_list(&[]), "");
        for text in ["0,2-3,7", "5", "1-12"] {
            assert_eq!(format_cpu_list(&parse_cpu_list(text).unwrap()), text);
        }
    }
}
