//! Text tables as printed and as HTML, the form every result and report shares.

use std::fmt::Write;

use serde::{Deserialize, Serialize};

/// A table of text cells, as printed.
///
/// ```
/// use slipstream_bench::Table;
/// let mut t = Table::new(&["transaction", "tps"]);
/// t.row(vec!["browse".into(), "812.5".into()]);
/// assert_eq!(t.rows.len(), 1);
/// assert_eq!(t.render(), "transaction  tps\n-----------  -----\nbrowse       812.5");
/// ```
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Table {
    /// Column headings.
    pub columns: Vec<String>,
    /// Rows of cells.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these headings.
    ///
    /// ```
    /// let t = slipstream_bench::Table::new(&["name", "count"]);
    /// assert_eq!(t.columns, ["name", "count"]);
    /// assert!(t.rows.is_empty());
    /// ```
    pub fn new(columns: &[&str]) -> Table {
        Table {
            columns: columns.iter().map(|c| c.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row. A control character in a cell (a newline, an escape sequence) is kept
    /// escaped, as `\n` or `\u{1b}`: it would break the table's lines or drive the terminal.
    ///
    /// ```
    /// let mut t = slipstream_bench::Table::new(&["name"]);
    /// t.row(vec!["two\nlines".into()]); // a newline would break the table: kept escaped
    /// assert_eq!(t.rows[0][0], "two\\nlines");
    /// ```
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells.into_iter().map(printable).collect());
    }

    /// Renders with aligned columns: text left, numbers right.
    ///
    /// ```
    /// let mut t = slipstream_bench::Table::new(&["type", "count"]);
    /// t.row(vec!["new-order".into(), "7".into()]);
    /// t.row(vec!["browse".into(), "1200".into()]);
    /// // Text left, numbers right.
    /// assert_eq!(t.render(), "type       count\n---------  -----\nnew-order      7\nbrowse      1200");
    /// ```
    pub fn render(&self) -> String {
        let n = self.columns.len();
        let mut widths: Vec<usize> = self.columns.iter().map(|c| c.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(n) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let numeric = |s: &str| s.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '+');
        let line = |cells: &[String]| {
            let parts: Vec<String> = cells
                .iter()
                .enumerate()
                .take(n)
                .map(|(i, c)| {
                    // Padded by hand: `format!`'s width panics past u16::MAX, and a cell
                    // (a query's JSON, a long name) can be longer than that.
                    let pad = " ".repeat(widths[i].saturating_sub(c.chars().count()));
                    if numeric(c) {
                        format!("{pad}{c}")
                    } else {
                        format!("{c}{pad}")
                    }
                })
                .collect();
            parts.join("  ").trim_end().to_string()
        };
        let mut out = line(&self.columns);
        out.push('\n');
        out.push_str(
            &widths
                .iter()
                .map(|w| "-".repeat(*w))
                .collect::<Vec<_>>()
                .join("  "),
        );
        for row in &self.rows {
            out.push('\n');
            out.push_str(&line(row));
        }
        out
    }
}

/// Appends `t` as an HTML table; cells that start with a digit are right-aligned.
///
/// ```
/// let mut t = slipstream_bench::Table::new(&["type", "count"]);
/// t.row(vec!["<b>".into(), "7".into()]);
/// let mut html = String::new();
/// slipstream_bench::table::push_table(&mut html, &t);
/// assert!(html.contains("<td>&lt;b&gt;</td><td class=\"n\">7</td>"));
/// ```
pub fn push_table(html: &mut String, t: &Table) {
    html.push_str("<table><tr>");
    for c in &t.columns {
        let _ = write!(html, "<th>{}</th>", esc(c));
    }
    html.push_str("</tr>\n");
    for row in &t.rows {
        html.push_str("<tr>");
        for cell in row {
            let class = if cell.starts_with(|c: char| c.is_ascii_digit()) {
                " class=\"n\""
            } else {
                ""
            };
            let _ = write!(html, "<td{class}>{}</td>", esc(cell));
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table>\n");
}

/// `s` with every control character escaped (`\n`, `\u{1b}`).
///
/// ```
/// assert_eq!(slipstream_bench::table::printable("a\nb\u{1b}[2J".into()), "a\\nb\\u{1b}[2J");
/// ```
pub fn printable(s: String) -> String {
    if !s.chars().any(char::is_control) {
        return s;
    }
    s.chars()
        .map(|c| match c.is_control() {
            true => c.escape_default().to_string(),
            false => c.to_string(),
        })
        .collect()
}

/// As [`printable`], keeping line breaks and tabs: for text of several lines.
///
/// ```
/// assert_eq!(slipstream_bench::table::printable_lines("a\tb\n\u{7}"), "a\tb\n\\u{7}");
/// ```
pub fn printable_lines(s: &str) -> String {
    s.split_inclusive('\n')
        .map(|line| {
            let (body, end) = match line.strip_suffix('\n') {
                Some(b) => (b, "\n"),
                None => (line, ""),
            };
            let kept: String = body
                .split('\t')
                .map(|part| printable(part.to_string()))
                .collect::<Vec<_>>()
                .join("\t");
            kept + end
        })
        .collect()
}

/// Escapes text for HTML.
///
/// ```
/// assert_eq!(slipstream_bench::table::esc("a < b & \"c\""), "a &lt; b &amp; &quot;c&quot;");
/// ```
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_numbers_right() {
        let mut t = Table::new(&["client", "ops/s"]);
        t.row(vec!["slipstream".into(), "23456".into()]);
        t.row(vec!["tp".into(), "9".into()]);
        assert_eq!(
            t.render(),
            "client      ops/s\n----------  -----\nslipstream  23456\ntp              9"
        );
    }

    /// A name with a newline or an escape sequence (from a result file) keeps the table's
    /// lines and drives no terminal (found by session 33's attackers).
    #[test]
    fn control_characters_in_cells_are_escaped() {
        let mut t = Table::new(&["transaction", "count"]);
        t.row(vec!["a\nb\u{1b}[2J".into(), "1".into()]);
        let text = t.render();
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(
            !text.contains('\u{1b}') && text.contains("a\\nb\\u{1b}[2J"),
            "{text}"
        );
        let lines = printable_lines("v\u{1b}[31m\r\n\tx\n");
        assert_eq!(lines, "v\\u{1b}[31m\\r\n\tx\n");
    }
    /// A cell longer than 65,535 characters (`slipstream sql "SELECT repeat('x', 65536)"`)
    /// is printed whole: `format!`'s width argument panicked past u16::MAX (session 37's
    /// attacker).
    #[test]
    fn a_cell_longer_than_sixty_five_thousand_characters_is_printed() {
        let mut t = Table::new(&["repeat", "n"]);
        let long = "x".repeat(70_000);
        t.row(vec![long.clone(), "1".into()]);
        t.row(vec!["y".into(), "22".into()]);
        let text = t.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[2], format!("{long}   1"));
        assert_eq!(lines[3].len(), 70_000 + 2 + 2, "padded to the long cell");
    }
}
