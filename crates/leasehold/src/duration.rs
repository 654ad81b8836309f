//! Durations written the way people write them: `500ms`, `2s`, `1.5s`, `1m30s`, `2h`. One
//! grammar for every program of the project (the command line, the example applications, the
//! simulator's tests), so that a value reads the same wherever it is given; a bare number
//! has no unit and is refused rather than guessed.
//!
//! ```
//! use std::time::Duration;
//! use leasehold::duration::{format_duration, parse_duration};
//!
//! assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
//! assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
//! assert!(parse_duration("30").is_err());
//! assert_eq!(format_duration(Duration::from_millis(1530)), "1.53s");
//! ```

use std::fmt;
use std::time::Duration;

/// Units accepted after a number, in nanoseconds, longest first so that `ms` is not read as
/// `m`.
const UNITS: [(&str, u128); 5] = [
    ("ms", 1_000_000),
    ("us", 1_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// How durations are written, as help and errors say it.
const GRAMMAR: &str = "a number and a unit: 500ms, 2s, 1.5s, 1m30s, 2h";

/// The line of `--help` that says how durations are written.
pub fn help() -> String {
    format!("Durations are {GRAMMAR} (units us, ms, s, m, h).")
}

/// A duration string that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidDuration {
    input: String,
    reason: &'static str,
}

impl fmt::Display for InvalidDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid duration {:?}: {} (write {GRAMMAR})",
            self.input, self.reason
        )
    }
}

impl std::error::Error for InvalidDuration {}

/// Parses one or more `<number><unit>` pairs, units `us`, `ms`, `s`, `m`, `h`.
///
/// Read exactly, in whole nanoseconds (digits below a nanosecond are dropped), so that what
/// a person writes is what the program gets; a total beyond [`Duration::MAX`] is refused.
pub fn parse_duration(input: &str) -> Result<Duration, InvalidDuration> {
    let fail = |reason| InvalidDuration {
        input: input.to_owned(),
        reason,
    };
    let mut rest = input.trim();
    if rest.is_empty() {
        return Err(fail("it is empty"));
    }
    let mut total_nanos: u128 = 0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| fail("the number has no unit"))?;
        if number_len == 0 {
            return Err(fail("expected a number"));
        }
        let number = &rest[..number_len];
        rest = &rest[number_len..];
        let (unit, scale) = UNITS
            .iter()
            .find(|(unit, _)| rest.starts_with(unit))
            .ok_or_else(|| fail("unknown unit"))?;
        rest = &rest[unit.len()..];
        let nanos = scaled(number, *scale).ok_or_else(|| fail("the number is malformed"))?;
        total_nanos = nanos
            .and_then(|nanos| total_nanos.checked_add(nanos))
            .ok_or_else(|| fail("out of range"))?;
    }
    let seconds = u64::try_from(total_nanos / 1_000_000_000).map_err(|_| fail("out of range"))?;
    Ok(Duration::new(seconds, (total_nanos % 1_000_000_000) as u32))
}

/// `number` (digits with at most one decimal point, at least one digit) times `scale`
/// nanoseconds: `None` if malformed, `Some(None)` if too large for a `u128`.
fn scaled(number: &str, scale: u128) -> Option<Option<u128>> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if fraction.contains('.') || (whole.is_empty() && fraction.is_empty()) {
        return None;
    }
    let mut nanos = Some(0u128);
    for digit in whole.bytes() {
        nanos = nanos
            .and_then(|n| n.checked_mul(10))
            .and_then(|n| n.checked_add(u128::from(digit - b'0')));
    }
    let mut nanos = nanos.and_then(|n| n.checked_mul(scale));
    // Each fraction digit is worth a tenth of the one before; the scale is at most 3.6e12
    // nanoseconds, so digits past the thirteenth are below a nanosecond.
    let mut place = scale;
    for digit in fraction.bytes() {
        place /= 10;
        nanos = nanos.and_then(|n| n.checked_add(u128::from(digit - b'0') * place));
    }
    Some(nanos)
}

/// Formats a duration for people: `850ms`, `1.53s`, `2m05s`.
pub fn format_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis < 1000 {
        format!("{millis}ms")
    } else if millis < 60_000 {
        format!("{:.2}s", duration.as_secs_f64())
    } else {
        let seconds = duration.as_secs();
        format!("{}m{:02}s", seconds / 60, seconds % 60)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn reads_each_unit_and_combinations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn refuses_malformed_input_naming_it() {
        for bad in ["", "5", "ms", "2x", "1.2.3s", "-1s", "2 s", "s2"] {
            let error = parse_duration(bad).unwrap_err().to_string();
            assert!(error.contains(&format!("{bad:?}")), "{error}");
        }
    }

    #[test]
    fn refuses_what_no_duration_can_hold() {
        for huge in [
            "18446744073709551616s",
            "99999999999999999999999999999999999999999h",
            "5124095576030432h1h",
        ] {
            let error = parse_duration(huge).unwrap_err().to_string();
            assert!(error.contains("out of range"), "{error}");
        }
        assert_eq!(
            parse_duration("1000000000h"),
            Ok(Duration::from_secs(3_600_000_000_000))
        );
        assert_eq!(parse_duration("0.1s"), Ok(Duration::from_millis(100)));
        assert_eq!(parse_duration(".5s"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5us"), Ok(Duration::from_nanos(1500)));
        assert!(parse_duration(".s").is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn never_panics(input in "[0-9.a-z ]{0,40}|\\PC{0,40}") {
            let _ = parse_duration(&input);
        }

        #[test]
        fn reads_back_what_it_is_given(
            amount in 0..1_000_000_000_000u64,
            unit in 0..UNITS.len(),
        ) {
            let (name, nanos) = UNITS[unit];
            let expected = u128::from(amount) * nanos;
            let parsed = parse_duration(&format!("{amount}{name}")).unwrap();
            prop_assert_eq!(parsed.as_nanos(), expected);
        }

        #[test]
        fn reads_back_what_it_formats(millis in 0..10_000_000_000u64) {
            let duration = Duration::from_millis(millis);
            let parsed = parse_duration(&format_duration(duration)).unwrap();
            // Formatting keeps milliseconds below a second, hundredths below a minute, and
            // whole seconds above.
            let precision = if millis < 60_000 { 10 } else { 1000 };
            prop_assert!(parsed.abs_diff(duration) < Duration::from_millis(precision));
        }
    }

    #[test]
    fn formats_for_people() {
        assert_eq!(format_duration(Duration::from_millis(850)), "850ms");
        assert_eq!(format_duration(Duration::from_millis(1534)), "1.53s");
        assert_eq!(format_duration(Duration::from_secs(125)), "2m05s");
    }
}
