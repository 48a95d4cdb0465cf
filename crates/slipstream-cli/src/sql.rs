//! `slipstream sql`: run SQL, print psql-style tables.

use slipstream_lab::Table;
use slipstream_pg::SimpleQueryMessage;

/// Renders a simple-query reply: a table per result set with its row count, and the command
/// tag of each statement that returns no rows.
pub fn render(reply: &[SimpleQueryMessage]) -> anyhow::Result<String> {
    let mut out = Vec::new();
    let mut table: Option<Table> = None;
    for message in reply {
        match message {
            SimpleQueryMessage::RowDescription(columns) => {
                let names: Vec<&str> = columns.iter().map(String::as_str).collect();
                table = Some(Table::new(&names));
            }
            SimpleQueryMessage::Row(row) => {
                if let Some(t) = table.as_mut() {
                    let cells = (0..row.len())
                        .map(|i| row.get(i).map(|v| v.unwrap_or("").to_string()))
                        .collect::<Result<Vec<_>, _>>()?;
                    t.row(cells);
                }
            }
            SimpleQueryMessage::CommandComplete { tag, rows } => match table.take() {
                Some(t) => out.push(format!(
                    "{}\n({rows} row{})",
                    t.render(),
                    if *rows == 1 { "" } else { "s" }
                )),
                None => out.push(tag.clone()),
            },
            _ => {}
        }
    }
    Ok(out.join("\n\n"))
}
