//! Append-only line logs that several processes on one host can share: the fence log
//! (acquisitions and losses) and the work log (what a node did under which epoch).
//!
//! Each line is written with a single `write` on a file opened with `O_APPEND`, so lines
//! from different processes never interleave within a line, and nothing is buffered: a
//! process killed a moment later has already handed its lines to the kernel.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use tokio::time::Instant;

/// An append-only file of lines.
#[derive(Debug)]
pub struct AppendLog {
    path: PathBuf,
    file: File,
}

impl AppendLog {
    /// Opens `path` for appending, creating it if needed.
    pub fn open(path: &Path) -> anyhow::Result<AppendLog> {
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .with_context(|| format!("cannot open log file {}", path.display()))?;
        Ok(AppendLog {
            path: path.to_owned(),
            file,
        })
    }

    /// Appends `line` (which must end in a newline) with one `write` call.
    pub fn append(&self, line: &str) -> io::Result<()> {
        debug_assert!(line.ends_with('\n'));
        let written = (&self.file).write(line.as_bytes())?;
        if written != line.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short write ({written} of {} bytes)", line.len()),
            ));
        }
        Ok(())
    }

    /// Appends `line`, logging a failure instead of returning it: a full disk must not stop
    /// the node from giving up its leases on time.
    pub fn append_or_warn(&self, line: &str) {
        if let Err(error) = self.append(line) {
            tracing::warn!(path = %self.path.display(), %error, "could not append to log");
        }
    }
}

/// Nanoseconds since the Unix epoch for a wall-clock time.
pub fn unix_ns(time: SystemTime) -> u128 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// The wall-clock time that corresponds to `at` on the monotonic clock, by measuring how
/// far `at` lies from now on both clocks.
pub fn wall_time_of(at: Instant) -> SystemTime {
    let (monotonic_now, wall_now) = (Instant::now(), SystemTime::now());
    if at <= monotonic_now {
        wall_now - (monotonic_now - at)
    } else {
        wall_now + (at - monotonic_now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn lines_are_appended_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let first = AppendLog::open(&path).unwrap();
        let second = AppendLog::open(&path).unwrap();
        first.append("1 a acquired 0 1\n").unwrap();
        second.append("2 b work 0 1\n").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "1 a acquired 0 1\n2 b work 0 1\n");
    }

    #[test]
    fn monotonic_instants_map_to_wall_time() {
        let wall_now = unix_ns(SystemTime::now());
        let past = unix_ns(wall_time_of(Instant::now() - Duration::from_secs(2)));
        let difference = wall_now as i128 - past as i128;
        assert!(
            (1_900_000_000..2_100_000_000).contains(&difference),
            "{difference}"
        );
    }
}
