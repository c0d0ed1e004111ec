//! Human-readable durations for policy files: `"250ms"`, `"10s"`, `"1m30s"`.
//!
//! A duration is one or more `<number><unit>` parts, added up. The number is a
//! non-negative decimal (`1.5s`); the unit is one of `ns`, `us` (or `µs`), `ms`, `s`,
//! `m`, `h`. Whitespace between parts is allowed (`"1m 30s"`). A bare number is
//! rejected: a unit is always required, so `"250"` cannot silently mean seconds in one
//! place and milliseconds in another.

use std::time::Duration;

const UNITS: [(&str, u128); 7] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Why a duration was rejected: a message meant to be shown next to the field's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DurationError {
    /// Well formed but beyond `u64` nanoseconds.
    pub(crate) too_large: bool,
    pub(crate) message: String,
}

fn invalid(message: String) -> DurationError {
    DurationError {
        too_large: false,
        message,
    }
}

/// Parses a duration such as `"250ms"`, `"1.5s"` or `"1h 30m"`.
///
/// # Errors
///
/// A [`DurationError`] saying what is wrong: no unit, unknown unit, not a number, too
/// large.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(invalid(
            "expected a duration such as \"250ms\" or \"10s\", got an empty string".into(),
        ));
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        if number.is_empty() {
            return Err(invalid(format!(
                "expected a number at `{after}` in duration \"{text}\" (write e.g. \"250ms\")"
            )));
        }
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.' || c.is_whitespace())
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        if unit.is_empty() {
            return Err(invalid(format!(
                "missing unit after `{number}` in duration \"{text}\" (one of ns, us, ms, s, m, h)"
            )));
        }
        let Some(&(_, nanos_per_unit)) = UNITS.iter().find(|(u, _)| *u == unit) else {
            return Err(invalid(format!(
                "unknown unit `{unit}` in duration \"{text}\" (one of ns, us, ms, s, m, h)"
            )));
        };
        let nanos = scale(number, nanos_per_unit).ok_or_else(|| {
            invalid(format!(
                "`{number}` is not a valid number in duration \"{text}\""
            ))
        })?;
        total = total.saturating_add(nanos);
        rest = after.trim_start();
    }
    let nanos = u64::try_from(total).map_err(|_| DurationError {
        too_large: true,
        message: format!("duration \"{text}\" is too large (at most about 584 years)"),
    })?;
    Ok(Duration::from_nanos(nanos))
}

/// `number` (decimal digits with at most one `.`) times `unit` nanoseconds, rounded
/// down to whole nanoseconds; `None` if it is not such a number.
fn scale(number: &str, unit: u128) -> Option<u128> {
    let (whole, fraction) = match number.split_once('.') {
        Some((w, f)) => (w, f),
        None => (number, ""),
    };
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return None;
    }
    let parse = |digits: &str| -> Option<u128> {
        if digits.is_empty() {
            Some(0)
        } else if digits.len() > 30 {
            // Far beyond any representable duration; also keeps u128 from overflowing.
            Some(u128::MAX / 2)
        } else {
            digits.parse().ok()
        }
    };
    let mut nanos = parse(whole)?.saturating_mul(unit);
    // Digits beyond the unit's nanosecond resolution cannot change the result.
    let mut scale = unit;
    for digit in fraction.bytes() {
        scale /= 10;
        if scale == 0 {
            break;
        }
        nanos = nanos.saturating_add(u128::from(digit - b'0') * scale);
    }
    Some(nanos)
}

/// Formats a duration in the largest unit that represents it exactly (`"1500ms"`,
/// `"2m"`, `"7ns"`), so [`parse_duration`] gives the same duration back.
pub(crate) fn format_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    let (unit, per) = [
        ("h", 3_600_000_000_000u128),
        ("m", 60_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
        ("us", 1_000),
        ("ns", 1),
    ]
    .into_iter()
    .find(|(_, per)| nanos.is_multiple_of(*per))
    .unwrap_or(("ns", 1));
    format!("{}{unit}", nanos / per)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_unit() {
        for (text, nanos) in [
            ("7ns", 7),
            ("3us", 3_000),
            ("3µs", 3_000),
            ("250ms", 250_000_000),
            ("10s", 10_000_000_000),
            ("2m", 120_000_000_000),
            ("1h", 3_600_000_000_000),
            ("1.5s", 1_500_000_000),
            (".5ms", 500_000),
            ("1m30s", 90_000_000_000),
            (" 1m 30s ", 90_000_000_000),
            ("0s", 0),
            ("1.0000000001s", 1_000_000_000),
        ] {
            assert_eq!(
                parse_duration(text),
                Ok(Duration::from_nanos(nanos)),
                "{text}"
            );
        }
    }

    #[test]
    fn rejects_bad_text_with_a_reason() {
        for (text, says) in [
            ("", "empty"),
            ("250", "missing unit"),
            ("10 s", "missing unit"),
            ("5d", "unknown unit `d`"),
            ("ms", "expected a number"),
            ("1.2.3s", "not a valid number"),
            (".s", "not a valid number"),
            ("-5s", "expected a number"),
            ("600000000000h", "too large"),
            ("99999999999999999999999999999999999999999s", "too large"),
        ] {
            let err = parse_duration(text).unwrap_err();
            assert!(err.message.contains(says), "{text}: {err:?}");
            assert_eq!(err.too_large, says == "too large", "{text}");
        }
    }

    #[test]
    fn format_round_trips() {
        for nanos in [
            1u64,
            999,
            1_000,
            1_500_000,
            250_000_000,
            1_000_000_000,
            90_000_000_000,
            7_200_000_000_000,
            u64::MAX,
        ] {
            let d = Duration::from_nanos(nanos);
            assert_eq!(parse_duration(&format_duration(d)), Ok(d), "{nanos}");
        }
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_duration(Duration::from_secs(120)), "2m");
    }
}
