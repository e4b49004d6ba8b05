//! Exact sums of Kubernetes quantities (`"4"`, `"3500m"`, `"16Gi"`, `"1e3"`), for a
//! member's allocatable capacity.

/// A quantity's value in units of 10⁻⁹ (the finest precision Kubernetes keeps), and
/// whether it was written with a binary suffix (the sum is written the same way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Amount {
    nanos: i128,
    binary: bool,
}

const NANO: i128 = 1_000_000_000;
const BINARY: [(&str, u32); 6] = [
    ("Ki", 10),
    ("Mi", 20),
    ("Gi", 30),
    ("Ti", 40),
    ("Pi", 50),
    ("Ei", 60),
];
const DECIMAL: [(&str, i32); 10] = [
    ("n", -9),
    ("u", -6),
    ("m", -3),
    ("", 0),
    ("k", 3),
    ("M", 6),
    ("G", 9),
    ("T", 12),
    ("P", 15),
    ("E", 18),
];

impl Amount {
    /// Reads a quantity; `None` if it is not one or does not fit 128 bits of nanos.
    /// Digits finer than 10⁻⁹ round up, as Kubernetes rounds them.
    pub(crate) fn parse(text: &str) -> Option<Amount> {
        let (negative, rest) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text.strip_prefix('+').unwrap_or(text)),
        };
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(end);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
            return None;
        }
        let mut mantissa: i128 = 0;
        for digit in whole.bytes().chain(fraction.bytes()) {
            mantissa = mantissa
                .checked_mul(10)?
                .checked_add(i128::from(digit - b'0'))?;
        }
        let (mut exponent10, binary, shift) =
            if let Some(&(_, shift)) = BINARY.iter().find(|(s, _)| *s == suffix) {
                (0, true, shift)
            } else if let Some(&(_, exponent)) = DECIMAL.iter().find(|(s, _)| *s == suffix) {
                (exponent, false, 0)
            } else {
                let exponent = suffix.strip_prefix(['e', 'E'])?;
                (exponent.parse::<i32>().ok()?, false, 0)
            };
        exponent10 += 9 - i32::try_from(fraction.len()).ok()?;
        let mut nanos = mantissa.checked_mul(1i128.checked_shl(shift)?)?;
        if exponent10 >= 0 {
            nanos = nanos.checked_mul(10i128.checked_pow(exponent10.unsigned_abs())?)?;
        } else {
            let divisor = 10i128
                .checked_pow(exponent10.unsigned_abs())
                .unwrap_or(i128::MAX);
            nanos = nanos / divisor + i128::from(nanos % divisor != 0);
        }
        Some(Amount {
            nanos: if negative { -nanos } else { nanos },
            binary,
        })
    }

    /// The sum, written the way the left side is; `None` on overflow.
    pub(crate) fn checked_add(self, other: Amount) -> Option<Amount> {
        Some(Amount {
            nanos: self.nanos.checked_add(other.nanos)?,
            binary: self.binary,
        })
    }

    /// Zero, written as the given kind of quantity.
    pub(crate) fn zero(binary: bool) -> Amount {
        Amount { nanos: 0, binary }
    }

    /// Whether it was written with a binary suffix.
    pub(crate) fn is_binary(self) -> bool {
        self.binary
    }
}

impl std::fmt::Display for Amount {
    /// The shortest exact form: the largest binary suffix that divides it (for a binary
    /// quantity), else the largest decimal one.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.nanos < 0 {
            f.write_str("-")?;
        }
        let nanos = self.nanos.unsigned_abs();
        let whole = nanos / NANO.unsigned_abs();
        if nanos == 0 {
            return f.write_str("0");
        }
        if self.binary && nanos.is_multiple_of(NANO.unsigned_abs()) {
            for &(suffix, shift) in BINARY.iter().rev() {
                if whole.is_multiple_of(1 << shift) {
                    return write!(f, "{}{suffix}", whole >> shift);
                }
            }
        }
        for &(suffix, exponent) in DECIMAL.iter().rev() {
            let unit = 10u128.pow((exponent + 9).unsigned_abs());
            if nanos.is_multiple_of(unit) {
                return write!(f, "{}{suffix}", nanos / unit);
            }
        }
        unreachable!("every amount is a whole number of nanos")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(values: &[&str]) -> String {
        let mut values = values.iter().map(|v| Amount::parse(v).unwrap());
        let first = values.next().unwrap();
        values
            .fold(first, |a, b| a.checked_add(b).unwrap())
            .to_string()
    }

    #[test]
    fn sums_are_exact_and_canonical() {
        assert_eq!(sum(&["4", "4"]), "8");
        assert_eq!(sum(&["3500m", "500m"]), "4");
        assert_eq!(sum(&["3920m", "3920m"]), "7840m");
        assert_eq!(sum(&["0.5", "250m"]), "750m");
        assert_eq!(sum(&["16Gi", "16Gi"]), "32Gi");
        assert_eq!(sum(&["16393217Ki", "1Gi"]), "17441793Ki");
        assert_eq!(sum(&["16393216Ki", "1Gi"]), "17033Mi");
        assert_eq!(sum(&["1536Mi", "512Mi"]), "2Gi");
        assert_eq!(sum(&["110", "110"]), "220");
        assert_eq!(sum(&["500", "500"]), "1k");
        assert_eq!(sum(&["1e3", "1k"]), "2k");
        assert_eq!(sum(&["1.5Gi"]), "1536Mi");
        assert_eq!(sum(&["100n", "1u"]), "1100n");
        assert_eq!(sum(&["1Ki", "1"]), "1025");
        assert_eq!(sum(&["0", "0"]), "0");
        assert_eq!(sum(&["-1", "500m"]), "-500m");
        // Finer than a nano rounds up, as Kubernetes does.
        assert_eq!(sum(&["0.0000000001"]), "1n");
    }

    #[test]
    fn not_quantities() {
        for bad in ["", "abc", "1.2.3", "5X", "Gi", "1e", "1ee3", "--1"] {
            assert_eq!(Amount::parse(bad), None, "{bad}");
        }
        assert_eq!(Amount::parse("1e40"), None);
        assert!(Amount::parse("8Ei").is_some());
    }
}
