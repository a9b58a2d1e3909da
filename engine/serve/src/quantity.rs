//! Kubernetes resource quantities, read exactly as the API server reads them
//! (apimachinery's `resource.ParseQuantity`):
//!
//! ```text
//! quantity  ::= sign? number suffix
//! number    ::= digits | digits "." digits? | "." digits
//! suffix    ::= "" | "m" | "k" | "M" | "G" | "T" | "P" | "E"        (decimal SI)
//!             | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei"            (binary SI)
//!             | ("e" | "E") sign? digits                          (decimal exponent)
//! ```
//!
//! Values are exact (a decimal mantissa times a power of ten or of two), converted to a
//! whole number of the caller's unit rounding up, as the API server rounds a fractional
//! milli-CPU or byte up. kube_quantity was tried first: it rejects `2E` and `1Ei`, which
//! the API server accepts, so this reads the grammar itself.

/// Why a quantity was refused, for messages like the API server's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuantityError {
    /// Not in the quantity grammar.
    Syntax,
    /// Below zero (resource requests and limits must not be).
    Negative,
    /// Larger than any node could have, in the unit asked for.
    TooLarge,
}

impl std::fmt::Display for QuantityError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            QuantityError::Syntax => {
                "is not a quantity (a number with an optional suffix: m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei, or e<exponent>)"
            }
            QuantityError::Negative => "must not be negative",
            QuantityError::TooLarge => "is larger than any node has",
        })
    }
}

/// Values at or above this many units are refused (no node has 10^18 of anything).
const MAX_UNITS: u128 = 1_000_000_000_000_000_000;

/// The quantity `raw` in units of 10^`unit_exp10` of the base unit (CPU cores: -3 for
/// milli-CPU; bytes: 0), rounded up to a whole unit.
pub fn parse(raw: &str, unit_exp10: i32) -> Result<u64, QuantityError> {
    let (negative, rest) = match raw.as_bytes().first() {
        Some(b'+') => (false, raw.get(1..).unwrap_or("")),
        Some(b'-') => (true, raw.get(1..).unwrap_or("")),
        _ => (false, raw),
    };
    let number_len = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_len);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if (int.is_empty() && frac.is_empty()) || frac.contains('.') {
        return Err(QuantityError::Syntax);
    }
    let (exp10, exp2) = suffix_scale(suffix)?;
    // The mantissa's digits without leading zeros; too many significant digits is too large.
    let digits: String = format!("{int}{frac}").trim_start_matches('0').to_string();
    let is_zero = digits.is_empty();
    if negative && !is_zero {
        return Err(QuantityError::Negative);
    }
    if is_zero {
        return Ok(0);
    }
    let scale = exp10
        - i64::try_from(frac.len()).map_err(|_| QuantityError::TooLarge)?
        - i64::from(unit_exp10);
    units(&digits, scale, exp2)
}

/// (power of ten, power of two) a suffix multiplies by.
fn suffix_scale(suffix: &str) -> Result<(i64, u32), QuantityError> {
    let binary = |n: u32| Ok((0, n));
    let decimal = |n: i64| Ok((n, 0));
    match suffix {
        "" => decimal(0),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        _ => {
            let exp = suffix
                .strip_prefix('e')
                .or_else(|| suffix.strip_prefix('E'))
                .ok_or(QuantityError::Syntax)?;
            let body = exp.strip_prefix(['+', '-']).unwrap_or(exp);
            if body.is_empty() || !body.bytes().all(|b| b.is_ascii_digit()) {
                return Err(QuantityError::Syntax);
            }
            // Any exponent this large overflows or rounds to one unit; clamp it.
            let n: i64 = exp
                .parse()
                .unwrap_or(if exp.starts_with('-') { -1_000 } else { 1_000 });
            decimal(n.clamp(-1_000, 1_000))
        }
    }
}

/// `digits` × 10^`scale` × 2^`exp2`, rounded up to a whole number; refused past
/// [`MAX_UNITS`].
fn units(digits: &str, scale: i64, exp2: u32) -> Result<u64, QuantityError> {
    if digits.len() > 40 || scale > 40 {
        // More than 10^40 even before the suffix: no node has that.
        if scale >= 0 || i64::try_from(digits.len()).unwrap_or(i64::MAX) + scale > 19 {
            return Err(QuantityError::TooLarge);
        }
    }
    let mantissa: u128 = digits.parse().map_err(|_| QuantityError::TooLarge)?;
    let with_binary = mantissa
        .checked_mul(1u128 << exp2)
        .ok_or(QuantityError::TooLarge)?;
    let value = if scale >= 0 {
        let factor = 10u128
            .checked_pow(u32::try_from(scale).map_err(|_| QuantityError::TooLarge)?)
            .ok_or(QuantityError::TooLarge)?;
        with_binary
            .checked_mul(factor)
            .ok_or(QuantityError::TooLarge)?
    } else {
        match 10u128.checked_pow(u32::try_from(-scale).unwrap_or(u32::MAX)) {
            // Rounds up: any fraction of a unit is a whole unit.
            Some(divisor) => with_binary.div_ceil(divisor),
            None => 1,
        }
    };
    if value >= MAX_UNITS {
        return Err(QuantityError::TooLarge);
    }
    u64::try_from(value).map_err(|_| QuantityError::TooLarge)
}

#[cfg(test)]
mod tests {
    use super::{parse, QuantityError};

    const MILLI: i32 = -3;

    #[test]
    fn every_suffix_and_form_the_api_server_accepts() {
        for (raw, unit, want) in [
            ("1", MILLI, 1_000),
            ("500m", MILLI, 500),
            ("0.5", MILLI, 500),
            (".5", MILLI, 500),
            ("5.", MILLI, 5_000),
            ("+2", MILLI, 2_000),
            ("1e3", 0, 1_000),
            ("1E3", 0, 1_000),
            ("1e+3", 0, 1_000),
            ("15e-1", MILLI, 1_500),
            ("1k", 0, 1_000),
            ("1M", 0, 1_000_000),
            ("1G", 0, 1_000_000_000),
            ("1T", 0, 1_000_000_000_000),
            ("1P", 0, 1_000_000_000_000_000),
            ("0.5E", 0, 500_000_000_000_000_000),
            ("1Ki", 0, 1_024),
            ("1.5Gi", 0, 1_610_612_736),
            ("1Ti", 0, 1 << 40),
            ("1Pi", 0, 1 << 50),
            ("0.5Ei", 0, 1 << 59),
            ("0", MILLI, 0),
            ("-0", MILLI, 0),
            ("000.000", MILLI, 0),
            // A fraction of a unit is rounded up, as the API server does.
            ("0.1m", MILLI, 1),
            ("1.0001", MILLI, 1_001),
            ("1e-30", 0, 1),
        ] {
            assert_eq!(parse(raw, unit), Ok(want), "{raw}");
        }
    }

    #[test]
    fn what_the_api_server_refuses_is_refused() {
        for raw in [
            "", "abc", "1 Gi", " 1", "1ki", "1KI", "1.2.3", ".", "+", "-", "1e", "1e+", "1ee3",
            "0x10", "1Gi ", "∞", "1mi", "1b", "--1", "1e3.5",
        ] {
            assert_eq!(parse(raw, 0), Err(QuantityError::Syntax), "{raw:?}");
        }
        assert_eq!(parse("-1", 0), Err(QuantityError::Negative));
        assert_eq!(parse("-500m", MILLI), Err(QuantityError::Negative));
        for raw in [
            "2E",
            "1Ei",
            "1e19",
            "99999999999999999999999",
            "1e1000",
            "1e99999999999999999999",
        ] {
            assert_eq!(parse(raw, 0), Err(QuantityError::TooLarge), "{raw}");
        }
    }
}
