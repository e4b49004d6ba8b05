//! Kubernetes resource quantities (`500m`, `2Gi`, `1.5`, `1e3`) as exact numbers: read,
//! compared, summed and written back.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

/// A Kubernetes quantity, held exactly to 10⁻¹⁸, together with whether it was written with
/// a binary suffix (as Kubernetes keeps a quantity's format, so a sum is written alike).
///
/// Suffixes: decimal SI `n u m k M G T P E`, binary `Ki Mi Gi Ti Pi Ei`, and decimal
/// exponents `e`/`E` followed by an optionally signed integer; the number may be signed and
/// have a fraction. Amounts compare by value alone, so `"1Ki" == "1024"` and
/// `"500m" < "1"`. A value too large for 128 bits is not an amount.
///
/// ```
/// use flotilla_api::quantity::Amount;
///
/// let q = |s: &str| Amount::parse(s).unwrap();
/// assert!(q("500m") < q("1"));
/// assert!(q("1") < q("1Ki"));
/// assert_eq!(q("1Ki"), q("1024"));
/// assert_eq!(q("16Gi").checked_add(q("512Mi")).unwrap().to_string(), "16896Mi");
/// assert_eq!(q("1.5").millis(), Some(1500));
/// assert!(Amount::parse("v1.32.1").is_none());
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Amount {
    /// The value rounded towards minus infinity.
    whole: i128,
    /// The rest, in units of 10⁻¹⁸, in `[0, 10¹⁸)`.
    atto: u64,
    /// Written with a binary suffix.
    binary: bool,
}

/// 10¹⁸: one in units of 10⁻¹⁸.
const ONE: u64 = 1_000_000_000_000_000_000;
/// 10⁹: one nano in units of 10⁻¹⁸, the finest precision Kubernetes keeps.
const NANO: u128 = 1_000_000_000;
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
    /// Reads a quantity as Kubernetes does: digits finer than 10⁻⁹ round up (away from
    /// zero) to the next nano. `None` if `text` is not a quantity or is too large.
    pub fn parse(text: &str) -> Option<Amount> {
        read(text, NANO).map(|(amount, _)| amount)
    }

    /// Reads a quantity without rounding: `None` if it needs digits finer than 10⁻¹⁸, as
    /// well as when [`Amount::parse`] would refuse it.
    pub fn parse_exact(text: &str) -> Option<Amount> {
        read(text, 1).and_then(|(amount, exact)| exact.then_some(amount))
    }

    /// Zero, written as a binary quantity or not.
    pub fn zero(binary: bool) -> Amount {
        Amount {
            whole: 0,
            atto: 0,
            binary,
        }
    }

    /// Whether it was written with a binary suffix (`Ki` … `Ei`).
    pub fn is_binary(self) -> bool {
        self.binary
    }

    /// The sum, written the way `self` is; `None` on overflow.
    pub fn checked_add(self, other: Amount) -> Option<Amount> {
        let atto = self.atto + other.atto;
        let whole = self.whole.checked_add(other.whole)?;
        Some(Amount {
            whole: whole.checked_add(i128::from(atto >= ONE))?,
            atto: atto % ONE,
            binary: self.binary,
        })
    }

    /// The value in thousandths, rounded up (towards +∞) like Kubernetes' `MilliValue`;
    /// `None` if that does not fit 128 bits.
    pub fn millis(self) -> Option<i128> {
        let thousandths = self.atto.div_ceil(ONE / 1000);
        self.whole
            .checked_mul(1000)?
            .checked_add(i128::from(thousandths))
    }

    /// The sign and the magnitude, as whole units and units of 10⁻¹⁸.
    fn magnitude(self) -> (bool, u128, u64) {
        if self.whole >= 0 || self.atto == 0 {
            (self.whole < 0, self.whole.unsigned_abs(), self.atto)
        } else {
            (true, (self.whole + 1).unsigned_abs(), ONE - self.atto)
        }
    }
}

/// Reads `text` with its magnitude rounded up to a multiple of `grain` units of 10⁻¹⁸, and
/// whether that was exact.
fn read(text: &str, grain: u128) -> Option<(Amount, bool)> {
    let (negative, rest) = match text.as_bytes().first()? {
        b'+' => (false, &text[1..]),
        b'-' => (true, &text[1..]),
        _ => (false, text),
    };
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(end);
    let (int, fraction) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return None;
    }
    let mut mantissa: u128 = 0;
    for digit in int.bytes().chain(fraction.bytes()) {
        mantissa = mantissa
            .checked_mul(10)?
            .checked_add(u128::from(digit - b'0'))?;
    }
    let (exponent, shift, binary) =
        if let Some(&(_, shift)) = BINARY.iter().find(|(s, _)| *s == suffix) {
            (0, shift, true)
        } else if let Some(&(_, exponent)) = DECIMAL.iter().find(|(s, _)| *s == suffix) {
            (i64::from(exponent), 0, false)
        } else {
            // One optional sign, then digits: what an integer's `parse` takes.
            let exponent = suffix.strip_prefix(['e', 'E'])?;
            (i64::from(exponent.parse::<i32>().ok()?), 0, false)
        };
    // |value| = numerator · 10^exponent
    let numerator = mantissa.checked_mul(1u128.checked_shl(shift)?)?;
    let exponent = exponent.checked_sub(i64::try_from(fraction.len()).ok()?)?;
    let pow10 = |n: u64| u32::try_from(n).ok().and_then(|n| 10u128.checked_pow(n));
    let scale = exponent.unsigned_abs();
    let (whole, atto, exact) = if exponent >= 0 {
        (numerator.checked_mul(pow10(scale)?)?, 0, true)
    } else {
        let (whole, rest) = pow10(scale).map_or((0, numerator), |d| (numerator / d, numerator % d));
        // rest · 10^-scale in units of 10⁻¹⁸, rounded up to the grain
        let (units, exact) = match 18u64.checked_sub(scale) {
            Some(up) => (rest * pow10(up)?, true),
            None => pow10(scale - 18).map_or((u128::from(rest > 0), rest == 0), |d| {
                (rest.div_ceil(d), rest % d == 0)
            }),
        };
        let atto = units.div_ceil(grain) * grain;
        (whole, atto, exact && atto == units)
    };
    let whole = i128::try_from(whole + atto / u128::from(ONE)).ok()?;
    let atto = u64::try_from(atto % u128::from(ONE)).ok()?;
    let (whole, atto) = match (negative, atto) {
        (false, _) => (whole, atto),
        (true, 0) => (-whole, 0),
        (true, atto) => (-whole - 1, ONE - atto),
    };
    Some((
        Amount {
            whole,
            atto,
            binary,
        },
        exact,
    ))
}

impl PartialEq for Amount {
    fn eq(&self, other: &Amount) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Amount {}

impl PartialOrd for Amount {
    fn partial_cmp(&self, other: &Amount) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Amount {
    /// By value, whatever the suffix.
    fn cmp(&self, other: &Amount) -> Ordering {
        (self.whole, self.atto).cmp(&(other.whole, other.atto))
    }
}

impl Hash for Amount {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self.whole, self.atto).hash(state);
    }
}

impl fmt::Display for Amount {
    /// The shortest exact form: for a binary amount, the largest binary suffix that divides
    /// it; else the largest decimal suffix; a value finer than nanos as a plain decimal.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (negative, whole, atto) = self.magnitude();
        if whole == 0 && atto == 0 {
            return f.write_str("0");
        }
        if negative {
            f.write_str("-")?;
        }
        if atto == 0 {
            if self.binary
                && let Some(&(suffix, shift)) = BINARY
                    .iter()
                    .rev()
                    .find(|(_, s)| whole.trailing_zeros() >= *s)
            {
                return write!(f, "{}{suffix}", whole >> shift);
            }
            for &(suffix, exponent) in DECIMAL.iter().rev().take_while(|(_, e)| *e >= 0) {
                let unit = 10u128.pow(exponent.unsigned_abs());
                if whole.is_multiple_of(unit) {
                    return write!(f, "{}{suffix}", whole / unit);
                }
            }
        }
        for (suffix, width) in [("m", 3), ("u", 6), ("n", 9)] {
            let unit = 10u64.pow(18 - width);
            if atto.is_multiple_of(unit) {
                let (part, width) = (atto / unit, width as usize);
                return match whole {
                    0 => write!(f, "{part}{suffix}"),
                    _ => write!(f, "{whole}{part:0width$}{suffix}"),
                };
            }
        }
        let digits = format!("{atto:018}");
        write!(f, "{whole}.{}", digits.trim_end_matches('0'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(text: &str) -> Amount {
        Amount::parse_exact(text).unwrap_or_else(|| panic!("{text} should parse"))
    }

    fn sum(values: &[&str]) -> String {
        let mut values = values.iter().map(|v| Amount::parse(v).unwrap());
        let first = values.next().unwrap();
        values
            .fold(first, |a, b| a.checked_add(b).unwrap())
            .to_string()
    }

    #[test]
    fn milli_is_below_one_and_kibi_equals_1024() {
        assert!(q("500m") < q("1"));
        assert!(q("1") < q("1Ki"));
        assert_eq!(q("1Ki"), q("1024"));
        assert_eq!(q("1000m"), q("1"));
    }

    #[test]
    fn binary_and_decimal_suffixes_compare_by_value() {
        assert!(q("1Gi") > q("1000Mi"));
        assert!(q("1G") < q("1Gi"));
        assert!(q("64Gi") > q("16"));
        assert_eq!(q("1k"), q("1000"));
        assert_eq!(q("1M"), q("1000k"));
        assert_eq!(q("2Ei"), q("2305843009213693952"));
        assert_eq!(q("1E"), q("1000000000000000000"));
        assert_eq!(q("1.5Gi"), q("1536Mi"));
    }

    #[test]
    fn plain_decimals_signs_and_exponents() {
        assert_eq!(q("16"), q("16.0"));
        assert!(q("-2.5") < q("-2"));
        assert!(q("-1") < q("0"));
        assert_eq!(q("+3"), q("3"));
        assert_eq!(q(".5"), q("500m"));
        assert_eq!(q("5."), q("5"));
        assert_eq!(q("1e3"), q("1k"));
        assert_eq!(q("1E3"), q("1000"));
        assert_eq!(q("1e+3"), q("1k"));
        assert_eq!(q("25e-2"), q("250m"));
        assert_eq!(q("1n"), q("0.000000001"));
        assert!(q("1n") > q("0"));
        assert!(q("1u") > q("999n"));
    }

    #[test]
    fn non_quantities_are_refused() {
        for text in [
            "", "v1.32.1", "1.32.1", "abc", "1KiB", "1K", "1 k", "-", ".", "1e", "1e+", "1ee3",
            "16x", "Ki", "e3", "--1", "+-1", "1e3Ki",
        ] {
            assert_eq!(Amount::parse(text), None, "{text:?}");
            assert_eq!(Amount::parse_exact(text), None, "{text:?}");
        }
    }

    #[test]
    fn values_beyond_range_or_exact_precision() {
        for text in ["1e40", "1e99", &"9".repeat(50)] {
            assert_eq!(Amount::parse(text), None, "{text}");
            assert_eq!(Amount::parse_exact(text), None, "{text}");
        }
        assert!(Amount::parse("8Ei").is_some());
        assert_eq!(Amount::parse_exact("1e-19"), None);
        assert!(Amount::parse_exact("1e-18").is_some());
        // Kubernetes rounds finer than a nano up, away from zero.
        assert_eq!(Amount::parse("1e-19"), Amount::parse("1n"));
        assert_eq!(Amount::parse("1e-100"), Amount::parse("1n"));
        assert_eq!(Amount::parse("-0.0000000001"), Amount::parse("-1n"));
        assert_eq!(Amount::parse("0e-100"), Amount::parse("0"));
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
        assert_eq!(sum(&["-1Gi", "-1Gi"]), "-2Gi");
        assert_eq!(sum(&["7", "500m"]), "7500m");
        // Finer than a nano rounds up, as Kubernetes does.
        assert_eq!(sum(&["0.0000000001"]), "1n");
        assert_eq!(q("1.0000000000000001").to_string(), "1.0000000000000001");
        assert_eq!(
            Amount::zero(true)
                .checked_add(q("2048"))
                .unwrap()
                .to_string(),
            "2Ki"
        );
        assert_eq!(
            q("170141183460469231731687303715884105727").checked_add(q("1")),
            None
        );
    }

    #[test]
    fn what_is_written_reads_back_the_same() {
        for text in [
            "1",
            "-1.5",
            "7500m",
            "-250u",
            "3Ei",
            "1e-18",
            "-0.000000000000000001",
        ] {
            let amount = q(text);
            assert_eq!(q(&amount.to_string()), amount, "{text} as {amount}");
        }
    }

    #[test]
    fn millis_round_up() {
        for (text, expected) in [
            ("0", 0),
            ("1", 1000),
            ("100m", 100),
            ("0.5", 500),
            (".25", 250),
            ("1.5k", 1_500_000),
            ("2Gi", 2 * 1024 * 1024 * 1024 * 1000),
            ("1e3", 1_000_000),
            ("1E", 10i128.pow(21)),
            ("1n", 1),
            ("+3", 3000),
            ("-1", -1000),
            ("-1500u", -1),
            ("-1n", 0),
        ] {
            assert_eq!(
                Amount::parse(text).unwrap().millis(),
                Some(expected),
                "{text}"
            );
        }
    }
}
