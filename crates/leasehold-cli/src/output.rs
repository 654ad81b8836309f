//! Standard output, shared by every command.

use std::io::{ErrorKind, Write};

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
