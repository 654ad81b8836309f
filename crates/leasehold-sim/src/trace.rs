//! The event trace of a run: hashed in full, the latest events kept for violation reports.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

/// Events kept for display; the hash covers all of them.
const KEEP: usize = 400;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Where an echoing trace sends each line.
type Echo = Box<dyn FnMut(&str) + Send>;

/// Every event of a run in order. Two runs of one seed must produce the same hash.
pub struct Trace {
    hash: u64,
    count: u64,
    recent: VecDeque<String>,
    echo: Option<Echo>,
}

impl Default for Trace {
    fn default() -> Self {
        Trace {
            hash: FNV_OFFSET,
            count: 0,
            recent: VecDeque::with_capacity(KEEP),
            echo: None,
        }
    }
}

impl fmt::Debug for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Trace")
            .field("hash", &self.hash)
            .field("count", &self.count)
            .field("echo", &self.echo.is_some())
            .finish_non_exhaustive()
    }
}

impl Trace {
    /// A trace that also hands each line to `echo` as it is recorded, for following a run
    /// as it happens.
    pub fn echoing(echo: impl FnMut(&str) + Send + 'static) -> Trace {
        Trace {
            echo: Some(Box::new(echo)),
            ..Trace::default()
        }
    }

    /// Appends an event that happened `at` after the start of the run.
    pub fn record(&mut self, at: Duration, event: String) {
        // FNV-1a rather than the standard hasher: its output is fixed across Rust releases,
        // so a hash printed today can be compared with one printed by a later build.
        for byte in at.as_nanos().to_le_bytes().iter().chain(event.as_bytes()) {
            self.hash ^= u64::from(*byte);
            self.hash = self.hash.wrapping_mul(FNV_PRIME);
        }
        self.count += 1;
        if self.recent.len() == KEEP {
            self.recent.pop_front();
        }
        let line = format!("{:>12.6}s  {event}", at.as_secs_f64());
        if let Some(echo) = &mut self.echo {
            echo(&line);
        }
        self.recent.push_back(line);
    }

    /// The hash of every event so far.
    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// How many events were recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The latest events that mention any of `needles` (all latest events if there are
    /// none), oldest first.
    pub fn recent(&self, needles: &[String], limit: usize) -> Vec<String> {
        let mut lines: Vec<String> = self
            .recent
            .iter()
            .rev()
            .filter(|line| needles.is_empty() || needles.iter().any(|n| line.contains(n.as_str())))
            .take(limit)
            .cloned()
            .collect();
        lines.reverse();
        lines
    }
}
