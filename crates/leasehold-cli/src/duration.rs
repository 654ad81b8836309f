//! Durations written the way people write them: `500ms`, `2s`, `1.5s`, `1m30s`, `2h`.

use std::fmt;
use std::time::Duration;

/// Units accepted after a number, longest first so that `ms` is not read as `m`.
const UNITS: [(&str, f64); 5] = [
    ("ms", 1e-3),
    ("us", 1e-6),
    ("s", 1.0),
    ("m", 60.0),
    ("h", 3600.0),
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
pub fn parse_duration(input: &str) -> Result<Duration, InvalidDuration> {
    let fail = |reason| InvalidDuration {
        input: input.to_owned(),
        reason,
    };
    let mut rest = input.trim();
    if rest.is_empty() {
        return Err(fail("it is empty"));
    }
    let mut total_seconds = 0.0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| fail("the number has no unit"))?;
        if number_len == 0 {
            return Err(fail("expected a number"));
        }
        let number: f64 = rest[..number_len]
            .parse()
            .map_err(|_| fail("the number is malformed"))?;
        rest = &rest[number_len..];
        let (unit, scale) = UNITS
            .iter()
            .find(|(unit, _)| rest.starts_with(unit))
            .ok_or_else(|| fail("unknown unit"))?;
        rest = &rest[unit.len()..];
        total_seconds += number * scale;
    }
    Duration::try_from_secs_f64(total_seconds).map_err(|_| fail("out of range"))
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
    fn formats_for_people() {
        assert_eq!(format_duration(Duration::from_millis(850)), "850ms");
        assert_eq!(format_duration(Duration::from_millis(1534)), "1.53s");
        assert_eq!(format_duration(Duration::from_secs(125)), "2m05s");
    }
}
