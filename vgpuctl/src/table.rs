//! Plain aligned tables for people; scripts use `--json`.

use serde_json::Value;

/// A table with a header row.
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names.
    pub fn new(header: &[&str]) -> Self {
        Table {
            rows: vec![header.iter().map(|h| (*h).to_owned()).collect()],
        }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, columns separated by two spaces, trailing spaces trimmed.
    pub fn render(&self) -> String {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..cols)
            .map(|c| {
                self.rows
                    .iter()
                    .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let line: Vec<String> = row
                .iter()
                .enumerate()
                .map(|(i, cell)| format!("{cell:<w$}", w = widths[i]))
                .collect();
            out.push_str(line.join("  ").trim_end());
            out.push('\n');
        }
        out
    }
}

/// A JSON value as a table cell: strings bare, null as `-`.
pub fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up() {
        let mut t = Table::new(&["ID", "STATE"]);
        t.row(vec!["a".into(), "ready".into()]);
        t.row(vec!["longer-id".into(), "-".into()]);
        assert_eq!(
            t.render(),
            "ID         STATE\na          ready\nlonger-id  -\n"
        );
        assert_eq!(cell(&Value::Null), "-");
        assert_eq!(cell(&serde_json::json!(3)), "3");
    }
}
