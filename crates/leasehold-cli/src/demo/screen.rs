//! The demo's picture of the partition map: one cell per partition showing its holder's
//! letter. On a terminal it is redrawn in place and colored per node; otherwise plain-text
//! snapshots are printed at phase changes only.

use std::io::{IsTerminal, Write};

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

/// Where the demo writes: standard output, redrawn in place when it is a terminal.
#[derive(Debug)]
pub struct Screen {
    live: bool,
    colored: bool,
    /// Lines of the grid currently on screen below the cursor's line, to move back over.
    drawn_lines: usize,
}

impl Screen {
    /// A screen for standard output.
    pub fn new() -> Screen {
        let live = std::io::stdout().is_terminal();
        Screen {
            live,
            colored: live && std::env::var_os("NO_COLOR").is_none(),
            drawn_lines: 0,
        }
    }

    /// Prints a line of narrative above the map.
    pub fn say(&mut self, line: &str) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}{line}", self.erase());
        self.drawn_lines = 0;
        let _ = out.flush();
    }

    /// Redraws the map in place (terminal only).
    pub fn draw(&mut self, frame: &Frame) {
        if self.live {
            self.show(frame, true);
        }
    }

    /// Prints the map at a phase change: redrawn on a terminal, a snapshot otherwise.
    pub fn snapshot(&mut self, frame: &Frame) {
        self.show(frame, self.live);
        if !self.live {
            println!();
        }
    }

    fn show(&mut self, frame: &Frame, in_place: bool) {
        let text = self.render(frame, in_place);
        let mut out = std::io::stdout().lock();
        let erase = if in_place {
            self.erase()
        } else {
            String::new()
        };
        let _ = write!(out, "{erase}{text}");
        let _ = out.flush();
        self.drawn_lines = if in_place { text.lines().count() } else { 0 };
    }

    /// Moves the cursor back to where the map started and clears to the end of the screen.
    fn erase(&self) -> String {
        if self.drawn_lines == 0 {
            String::new()
        } else {
            format!("\x1b[{}F\x1b[J", self.drawn_lines)
        }
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
            drawn_lines: 0,
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
