//! Text tables as printed and as HTML, the form every result and report shares.

use std::fmt::Write;

use serde::{Deserialize, Serialize};

/// A table of text cells, as printed.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Table {
    /// Column headings.
    pub columns: Vec<String>,
    /// Rows of cells.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these headings.
    pub fn new(columns: &[&str]) -> Table {
        Table {
            columns: columns.iter().map(|c| c.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Renders with aligned columns: text left, numbers right.
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
                    if numeric(c) {
                        format!("{c:>w$}", w = widths[i])
                    } else {
                        format!("{c:<w$}", w = widths[i])
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

/// Escapes text for HTML.
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
}
