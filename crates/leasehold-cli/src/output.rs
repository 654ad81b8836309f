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
