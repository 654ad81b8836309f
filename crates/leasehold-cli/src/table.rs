//! Plain aligned text tables for people; scripts use `--json`.

use std::fmt::Write as _;

/// A table of text cells printed with columns padded to their widest cell.
#[derive(Debug)]
pub struct Table {
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with these column titles.
    pub fn new(header: Vec<&'static str>) -> Table {
        Table {
            header,
            rows: Vec::new(),
        }
    }

    /// Appends a row; it must have one cell per column.
    pub fn push(&mut self, row: Vec<String>) {
        debug_assert_eq!(row.len(), self.header.len());
        self.rows.push(row);
    }

    /// The table as text, one line per row, trailing spaces trimmed.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let header: Vec<String> = self.header.iter().map(|h| h.to_string()).collect();
        let mut out = String::new();
        for row in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (cell, width) in row.iter().zip(&widths) {
                let _ = write!(line, "{cell:<width$}  ");
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// A cell for an optional value: the value, or `-`.
pub fn or_dash(value: Option<impl ToString>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up() {
        let mut table = Table::new(vec!["A", "LONGER"]);
        table.push(vec!["wide cell".into(), "x".into()]);
        assert_eq!(table.render(), "A          LONGER\nwide cell  x\n");
        assert_eq!(or_dash(None::<u32>), "-");
    }
}
