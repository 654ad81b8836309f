//! Standard output, shared by every command.

use std::io::{ErrorKind, IsTerminal, Write};

/// Writes `text` to standard output and flushes it. A reader that stopped reading, as in
/// `leasehold status | head`, is not an error: the rest is dropped, and the command ends with
/// the exit code it would have had. Any other failure (a full disk) is returned.
pub fn print(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(error) if error.kind() == ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// A count of work done, redrawn in place on standard error for a person watching. A file or a
/// pipe gets one line at each tenth of a long run (a 100,000-seed simulation runs for most of
/// an hour, and a log that says nothing until the end cannot tell a slow run from a stuck one);
/// short runs write nothing there, so that logs and scripts see only the result.
pub struct Progress {
    live: bool,
    drawn: bool,
    started: std::time::Instant,
    tenths_logged: u64,
}

/// Runs shorter than this write no progress lines to a file or a pipe.
const LOGGED_FROM: u64 = 1_000;

impl Progress {
    /// Progress redrawn on a terminal, or logged by tenths of long runs elsewhere.
    pub fn on_terminal() -> Progress {
        Progress {
            live: std::io::stderr().is_terminal(),
            drawn: false,
            started: std::time::Instant::now(),
            tenths_logged: 0,
        }
    }

    /// Shows `done/total what`.
    pub fn show(&mut self, done: u64, total: u64, what: &str) {
        if self.live {
            eprint!("\r{done}/{total} {what}");
            let _ = std::io::stderr().flush();
            self.drawn = true;
        } else if let Some(tenth) = tenth_passed(done, total, self.tenths_logged) {
            self.tenths_logged = tenth;
            eprintln!(
                "progress: {done}/{total} {what} after {:.0}s",
                self.started.elapsed().as_secs_f64()
            );
        }
    }

    /// Ends the line the progress was drawn on, if any.
    pub fn finish(self) {
        if self.drawn {
            eprintln!();
        }
    }
}

/// The tenth of a long run that `done` has newly reached, past `logged`.
fn tenth_passed(done: u64, total: u64, logged: u64) -> Option<u64> {
    if total < LOGGED_FROM {
        return None;
    }
    let tenth = done.saturating_mul(10) / total;
    (tenth > logged).then_some(tenth)
}

/// Whether to colour what goes to a stream: only a terminal, and not when `NO_COLOR` is set
/// to anything but the empty string (<https://no-color.org>).
pub fn colour(stream_is_terminal: bool) -> bool {
    colour_with(stream_is_terminal, std::env::var_os("NO_COLOR").as_deref())
}

fn colour_with(stream_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stream_is_terminal && no_color.is_none_or(|value| value.is_empty())
}

#[cfg(test)]
mod tests {
    use super::{colour_with, tenth_passed};
    use std::ffi::OsStr;

    #[test]
    fn long_runs_log_each_tenth_once_and_short_runs_nothing() {
        let mut logged = 0;
        let mut lines = Vec::new();
        for done in (100..=10_000).step_by(100) {
            if let Some(tenth) = tenth_passed(done, 10_000, logged) {
                logged = tenth;
                lines.push(done);
            }
        }
        assert_eq!(lines, (1..=10).map(|t| t * 1_000).collect::<Vec<_>>());
        assert_eq!(tenth_passed(999, 999, 0), None);
        // Coarse steps that jump two tenths log once, at the later one.
        assert_eq!(tenth_passed(2_500, 10_000, 0), Some(2));
    }

    #[test]
    fn colour_only_on_a_terminal_and_never_under_no_color() {
        assert!(colour_with(true, None));
        assert!(
            colour_with(true, Some(OsStr::new(""))),
            "an empty NO_COLOR is unset"
        );
        assert!(!colour_with(true, Some(OsStr::new("1"))));
        assert!(!colour_with(false, None));
    }
}
