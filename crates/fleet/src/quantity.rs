//! Numbers in cluster properties: plain decimals and Kubernetes quantities, compared exactly.

use std::cmp::Ordering;

/// A number read from a property value: a plain decimal (`"16"`, `"-2.5"`) or a Kubernetes
/// quantity (`"500m"`, `"64Gi"`, `"1.5k"`, `"1e3"`), held exactly.
///
/// Suffixes: decimal SI `n u m k M G T P E`, binary `Ki Mi Gi Ti Pi Ei`, and decimal
/// exponents `e`/`E` followed by an integer. Two quantities compare by value, so
/// `"1Ki" == "1024"` and `"500m" < "1"`.
///
/// Precision is exact to 10⁻¹⁸; a value needing finer digits, or too large for 128 bits,
/// is not a number (it is then compared as a string).
///
/// ```
/// use flotilla_fleet::Quantity;
///
/// let q = |s: &str| Quantity::parse(s).unwrap();
/// assert!(q("500m") < q("1"));
/// assert!(q("1") < q("1Ki"));
/// assert_eq!(q("1Ki"), q("1024"));
/// assert!(Quantity::parse("v1.32.1").is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Quantity {
    /// The value rounded towards minus infinity.
    whole: i128,
    /// The rest, in units of 10⁻¹⁸, in `[0, 10¹⁸)`.
    atto: u64,
}

/// The finest decimal precision kept: 10⁻¹⁸.
const MAX_SCALE: u32 = 18;

impl Quantity {
    /// Reads a plain number or a Kubernetes quantity; `None` if `text` is neither.
    pub fn parse(text: &str) -> Option<Self> {
        let (negative, rest) = match text.as_bytes().first()? {
            b'+' => (false, &text[1..]),
            b'-' => (true, &text[1..]),
            _ => (false, text),
        };
        let digits_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(digits_end);
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        if int_part.is_empty() && frac_part.is_empty() || frac_part.contains('.') {
            return None;
        }
        // value = mantissa · 10^exponent10 · 2^exponent2
        let mut mantissa: i128 = 0;
        for digit in int_part.bytes().chain(frac_part.bytes()) {
            mantissa = mantissa
                .checked_mul(10)?
                .checked_add(i128::from(digit - b'0'))?;
        }
        let mut exponent10 = -i64::try_from(frac_part.len()).ok()?;
        let mut exponent2: u32 = 0;
        match suffix {
            "" => {}
            "n" => exponent10 -= 9,
            "u" => exponent10 -= 6,
            "m" => exponent10 -= 3,
            "k" => exponent10 += 3,
            "M" => exponent10 += 6,
            "G" => exponent10 += 9,
            "T" => exponent10 += 12,
            "P" => exponent10 += 15,
            "E" => exponent10 += 18,
            "Ki" => exponent2 = 10,
            "Mi" => exponent2 = 20,
            "Gi" => exponent2 = 30,
            "Ti" => exponent2 = 40,
            "Pi" => exponent2 = 50,
            "Ei" => exponent2 = 60,
            _ => {
                let exponent = suffix.strip_prefix(['e', 'E'])?;
                let unsigned = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
                if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                exponent10 = exponent10.checked_add(exponent.parse::<i64>().ok()?)?;
            }
        }
        mantissa = mantissa.checked_mul(1i128.checked_shl(exponent2)?)?;
        if exponent10 >= 0 {
            let factor = 10i128.checked_pow(u32::try_from(exponent10).ok()?)?;
            mantissa = mantissa.checked_mul(factor)?;
            exponent10 = 0;
        }
        let scale = u32::try_from(-exponent10).ok()?;
        if scale > MAX_SCALE {
            return None;
        }
        if negative {
            mantissa = -mantissa;
        }
        let denominator = 10i128.pow(scale);
        let atto = mantissa.rem_euclid(denominator) * 10i128.pow(MAX_SCALE - scale);
        Some(Quantity {
            whole: mantissa.div_euclid(denominator),
            atto: u64::try_from(atto).ok()?,
        })
    }
}

/// Compares two property values: `Some` ordering when both are numbers or quantities,
/// `None` otherwise.
pub(crate) fn compare_numbers(left: &str, right: &str) -> Option<Ordering> {
    Some(Quantity::parse(left)?.cmp(&Quantity::parse(right)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(text: &str) -> Quantity {
        Quantity::parse(text).unwrap_or_else(|| panic!("{text} should parse"))
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
        assert_eq!(q("25e-2"), q("250m"));
        assert_eq!(q("1n"), q("0.000000001"));
        assert!(q("1n") > q("0"));
        assert!(q("1u") > q("999n"));
    }

    #[test]
    fn non_numbers_are_refused() {
        for text in [
            "", "v1.32.1", "1.32.1", "abc", "1KiB", "1 k", "-", ".", "1e", "1e+", "16x", "Ki",
        ] {
            assert_eq!(Quantity::parse(text), None, "{text:?}");
        }
    }

    #[test]
    fn values_beyond_exact_range_are_not_numbers() {
        assert_eq!(Quantity::parse("1e-19"), None);
        assert_eq!(Quantity::parse("1e40"), None);
        assert_eq!(Quantity::parse(&"9".repeat(50)), None);
        assert!(Quantity::parse("1e-18").is_some());
    }

    #[test]
    fn compare_numbers_needs_two_numbers() {
        assert_eq!(compare_numbers("8", "16"), Some(Ordering::Less));
        assert_eq!(compare_numbers("v1.32.1", "16"), None);
        assert_eq!(compare_numbers("16", "v1"), None);
    }
}
