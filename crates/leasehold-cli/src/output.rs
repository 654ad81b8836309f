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

/// A count of work done, redrawn in place on standard error for a person watching; a file
/// or a pipe gets nothing, so that logs and scripts see only the result.
pub struct Progress {
    live: bool,
    drawn: bool,
}

impl Progress {
    /// Progress shown only if standard error is a terminal.
    pub fn on_terminal() -> Progress {
        Progress {
            live: std::io::stderr().is_terminal(),
            drawn: false,
        }
    }

    /// Shows `done/total what`.
    pub fn show(&mut self, done: u64, total: u64, what: &str) {
        if self.live {
            eprint!("\r{done}/{total} {what}");
            let _ = std::io::stderr().flush();
            self.drawn = true;
        }
    }

    /// Ends the line the progress was drawn on, if any.
    pub fn finish(self) {
        if self.drawn {
            eprintln!();
        }
    }
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
    use super::colour_with;
    use std::ffi::OsStr;

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
