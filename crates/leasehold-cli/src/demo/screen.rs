//! The demo's picture of the partition map: one cell per partition showing its holder's
//! letter. On a terminal it is redrawn in place and colored per node; otherwise plain-text
//! snapshots are printed at phase changes only.

use std::io::{IsTerminal, Write};
use std::sync::{Mutex, MutexGuard};

/// Cells per row of the grid.
const ROW_CELLS: usize = 16;

/// ANSI foreground colors given to nodes in turn.
const COLORS: [u8; 12] = [31, 32, 33, 34, 35, 36, 91, 92, 93, 94, 95, 96];

/// What one node is doing, as shown under the grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// Running normally.
    Running,
    /// Stopped abruptly, without releasing anything.
    Crashed,
    /// Handing its partitions off.
    Draining,
    /// Shut down gracefully.
    Stopped,
}

/// Everything one drawing shows.
#[derive(Debug, Clone)]
pub struct Frame {
    /// Per partition, the index of the node holding it.
    pub holders: Vec<Option<usize>>,
    /// Per node, its state.
    pub states: Vec<NodeState>,
    /// The latest event, if any.
    pub last_event: Option<String>,
}

/// Lines of the live map on screen below the narrative, to move back over before anything
/// else is written. Shared with the log writer, so a log line never lands inside the map.
static DRAWN_LINES: Mutex<usize> = Mutex::new(0);

fn drawn_lines() -> MutexGuard<'static, usize> {
    DRAWN_LINES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Erases the live map, if one is drawn, leaving the cursor where it started.
fn erase(out: &mut impl Write, drawn: &mut usize) {
    if *drawn > 0 {
        let _ = write!(out, "\x1b[{}F\x1b[J", *drawn);
        let _ = out.flush();
        *drawn = 0;
    }
}

/// Where the demo writes: standard output, with a live map redrawn in place below the
/// narrative when it is a terminal.
#[derive(Debug)]
pub struct Screen {
    live: bool,
    colored: bool,
}

impl Screen {
    /// A screen for standard output.
    pub fn new() -> Screen {
        let live = std::io::stdout().is_terminal();
        Screen {
            live,
            colored: crate::output::colour(live),
        }
    }

    /// Prints a line of narrative above the live map.
    pub fn say(&self, line: &str) {
        let mut drawn = drawn_lines();
        let mut out = std::io::stdout().lock();
        erase(&mut out, &mut drawn);
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }

    /// Redraws the live map in place (terminal only).
    pub fn draw(&self, frame: &Frame) {
        if !self.live {
            return;
        }
        let text = self.render(frame, true);
        let mut drawn = drawn_lines();
        let mut out = std::io::stdout().lock();
        erase(&mut out, &mut drawn);
        let _ = write!(out, "{text}");
        let _ = out.flush();
        *drawn = text.lines().count();
    }

    /// Prints the map as it stands at a phase change, to stay in the narrative.
    pub fn snapshot(&self, frame: &Frame) {
        self.say(&self.render(frame, false));
    }

    fn paint(&self, node: usize, text: &str) -> String {
        if self.colored {
            format!("\x1b[{}m{text}\x1b[0m", COLORS[node % COLORS.len()])
        } else {
            text.to_owned()
        }
    }

    fn render(&self, frame: &Frame, with_event: bool) -> String {
        let mut out = String::new();
        for (row, cells) in frame.holders.chunks(ROW_CELLS).enumerate() {
            out.push_str(&format!("  {:>4} |", row * ROW_CELLS));
            for holder in cells {
                let cell = match holder {
                    Some(node) => self.paint(*node, &letter(*node).to_string()),
                    None => ".".to_owned(),
                };
                out.push(' ');
                out.push_str(&cell);
            }
            out.push('\n');
        }
        let mut legend = Vec::new();
        for (node, state) in frame.states.iter().enumerate() {
            let count = frame.holders.iter().filter(|h| **h == Some(node)).count();
            let label = match state {
                NodeState::Running => String::new(),
                NodeState::Crashed => " crashed".into(),
                NodeState::Draining => " draining".into(),
                NodeState::Stopped => " stopped".into(),
            };
            let entry = format!("{}={count}{label}", letter(node));
            legend.push(self.paint(node, &entry));
        }
        let unheld = frame.holders.iter().filter(|h| h.is_none()).count();
        out.push_str(&format!("  nodes: {}  free: {unheld}\n", legend.join("  ")));
        if with_event {
            let event = frame.last_event.as_deref().unwrap_or("");
            out.push_str(&format!("  last: {event}\n"));
        }
        out
    }
}

/// A writer for log lines that first erases the live map, so that logs and map never mix
/// on a terminal; the map is redrawn below at the next refresh.
pub struct LogWriter {
    _drawn: MutexGuard<'static, usize>,
}

impl LogWriter {
    /// Takes the screen for one log line.
    pub fn new() -> LogWriter {
        let mut drawn = drawn_lines();
        erase(&mut std::io::stdout().lock(), &mut drawn);
        LogWriter { _drawn: drawn }
    }
}

impl Write for LogWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        std::io::stderr().write(bytes)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// The letter shown for node `index`: A, B, C, ...
pub fn letter(index: usize) -> char {
    char::from(b'A' + (index % 26) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_grid_shows_holders_and_counts() {
        let screen = Screen {
            live: false,
            colored: false,
        };
        let frame = Frame {
            holders: vec![Some(0), Some(1), None, Some(0)],
            states: vec![NodeState::Running, NodeState::Crashed],
            last_event: None,
        };
        let text = screen.render(&frame, false);
        assert_eq!(
            text,
            "     0 | A B . A\n  nodes: A=2  B=1 crashed  free: 1\n"
        );
    }
}
