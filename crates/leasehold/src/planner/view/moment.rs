//! An instant in eight bytes, for the rows a view keeps by the million.

use std::sync::OnceLock;

use tokio::time::Instant;

/// An instant as signed nanoseconds from a base taken once per process: half the size of an
/// [`Instant`], exact to the nanosecond, and within ±292 years of the base, so that a
/// simulator's clocks, which start anywhere, fit too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Moment(i64);

fn base() -> Instant {
    static BASE: OnceLock<std::time::Instant> = OnceLock::new();
    Instant::from_std(*BASE.get_or_init(std::time::Instant::now))
}

fn nanos(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX)
}

impl Moment {
    /// `at`, compacted.
    pub(crate) fn of(at: Instant) -> Moment {
        let base = base();
        match at.checked_duration_since(base) {
            Some(after) => Moment(nanos(after)),
            None => Moment(-nanos(base.duration_since(at))),
        }
    }

    /// The instant again.
    pub(crate) fn instant(self) -> Instant {
        let base = base();
        let offset = std::time::Duration::from_nanos(self.0.unsigned_abs());
        match self.0 >= 0 {
            true => base + offset,
            false => base - offset,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn instants_before_and_after_the_base_come_back_exactly() {
        let now = Instant::now();
        for at in [
            now,
            now + Duration::from_nanos(1),
            now + Duration::from_secs(86_400 * 365),
            now - Duration::from_nanos(123_456_789),
            base(),
        ] {
            assert_eq!(Moment::of(at).instant(), at);
        }
    }
}
