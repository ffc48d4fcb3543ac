//! Rows as CSV or JSON lines: a list of any `serde::Serialize` rows (the Calls search, the
//! registrations, a report's table, the devices list) written one at a time to any
//! `io::Write`, so that an export of a million rows never holds them all. Each export has a
//! fixed list of column names ([`RowWriter::new`]); the CSV's header line and every JSON line
//! carry exactly those, in that order, whatever the row type serializes besides.
//!
//! - **CSV** (RFC 4180): a header line, then one line per row, CRLF at each end; a field that
//!   holds `,`, `"`, CR or LF is quoted and its quotes doubled. A missing or null value is an
//!   empty field; `true`/`false` and numbers as JSON writes them; a nested value (a list, a
//!   map such as a call's `headers`) as its compact JSON text.
//! - **Spreadsheets**: a text field that begins with `=`, `+`, `-`, `@`, a tab or a CR is one
//!   a spreadsheet may run as a formula (`=HYPERLINK(...)`, `@SUM(...)`, `-2+3+cmd|...`, the
//!   OWASP "CSV injection"): such a field is written with a `'` before it, which spreadsheets
//!   show as text and do not display. A field that is a plain number (`+4930123456`, `-1.5`:
//!   digits with at most a sign, a point and an exponent) is left as it is, so that phone
//!   numbers keep their `+`. JSON lines are never changed this way: they are for programs.
//! - **JSON lines**: one object per row, the columns in order (a missing one as `null`), `\n`
//!   after each; no header.
//!
//! Never: buffers more than one row (the caller decides when to flush), or reads anything.
//! Start at [`Format`] and [`RowWriter`].

use std::io::Write;

/// What an export is written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Csv,
    JsonLines,
}

/// Why a row could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("writing the export: {0}")]
    Io(#[from] std::io::Error),
    /// The row type did not serialize to a JSON object (a program error, not an input's).
    #[error("an export row must serialize as an object with named fields: {0}")]
    NotAnObject(String),
    #[error("format {0:?} is not one of csv or jsonl")]
    UnknownFormat(String),
}

impl Format {
    /// `csv`, or `jsonl` (also `ndjson`), as a `format=` parameter or an option spells it.
    pub fn parse(s: &str) -> Result<Format, ExportError> {
        match s.to_ascii_lowercase().as_str() {
            "csv" => Ok(Format::Csv),
            "jsonl" | "ndjson" | "jsonlines" => Ok(Format::JsonLines),
            _ => Err(ExportError::UnknownFormat(s.chars().take(32).collect())),
        }
    }

    /// The media type of a download in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Csv => "text/csv; charset=utf-8; header=present",
            Format::JsonLines => "application/x-ndjson",
        }
    }

    /// The file name extension, without the dot.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Csv => "csv",
            Format::JsonLines => "jsonl",
        }
    }
}

/// Writes rows with a fixed list of columns.
pub struct RowWriter<W: Write> {
    out: W,
    format: Format,
    columns: Vec<String>,
    rows: u64,
}

impl<W: Write> RowWriter<W> {
    /// A writer of `columns` to `out`; the CSV header line goes out at once.
    pub fn new(mut out: W, format: Format, columns: &[&str]) -> Result<Self, ExportError> {
        if format == Format::Csv {
            let mut line = String::new();
            for (i, c) in columns.iter().enumerate() {
                if i > 0 {
                    line.push(',');
                }
                push_csv_field(&mut line, c);
            }
            line.push_str("\r\n");
            out.write_all(line.as_bytes())?;
        }
        Ok(RowWriter {
            out,
            format,
            columns: columns.iter().map(|c| c.to_string()).collect(),
            rows: 0,
        })
    }

    /// Writes one row: its fields named in the column list (a field the row lacks is empty).
    pub fn row<T: serde::Serialize>(&mut self, row: &T) -> Result<(), ExportError> {
        let value =
            serde_json::to_value(row).map_err(|e| ExportError::NotAnObject(e.to_string()))?;
        let serde_json::Value::Object(map) = value else {
            return Err(ExportError::NotAnObject(format!("{value:.40}")));
        };
        let mut line = String::with_capacity(512);
        match self.format {
            Format::Csv => {
                for (i, c) in self.columns.iter().enumerate() {
                    if i > 0 {
                        line.push(',');
                    }
                    csv_cell(&mut line, map.get(c));
                }
                line.push_str("\r\n");
            }
            Format::JsonLines => {
                line.push('{');
                for (i, c) in self.columns.iter().enumerate() {
                    if i > 0 {
                        line.push(',');
                    }
                    line.push_str(&serde_json::Value::String(c.clone()).to_string());
                    line.push(':');
                    match map.get(c) {
                        Some(v) => line.push_str(&v.to_string()),
                        None => line.push_str("null"),
                    }
                }
                line.push_str("}\n");
            }
        }
        self.out.write_all(line.as_bytes())?;
        self.rows += 1;
        Ok(())
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The output, to flush or to take what was written.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

/// One CSV field from a JSON value.
fn csv_cell(line: &mut String, v: Option<&serde_json::Value>) {
    use serde_json::Value;
    match v {
        None | Some(Value::Null) => {}
        Some(Value::Bool(b)) => line.push_str(if *b { "true" } else { "false" }),
        Some(Value::Number(n)) => line.push_str(&n.to_string()),
        Some(Value::String(s)) => push_text_field(line, s),
        Some(v @ (Value::Array(_) | Value::Object(_))) => push_text_field(line, &v.to_string()),
    }
}

/// A text field, defused for spreadsheets, then quoted as RFC 4180 asks.
fn push_text_field(line: &mut String, s: &str) {
    if formula_like(s) {
        let mut defused = String::with_capacity(s.len() + 1);
        defused.push('\'');
        defused.push_str(s);
        push_csv_field(line, &defused);
    } else {
        push_csv_field(line, s);
    }
}

/// Whether a spreadsheet may take `s` for a formula: it starts with one of `=+-@`, a tab or a
/// CR, and is not a plain number.
pub fn formula_like(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    matches!(first, '=' | '+' | '-' | '@' | '\t' | '\r') && !plain_number(s)
}

/// `[+-]digits[.digits][e[+-]digits]`: what a spreadsheet reads as a number, never a formula.
fn plain_number(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'+' | b'-')));
    let digits = |i: &mut usize| {
        let from = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i > from
    };
    let whole = digits(&mut i);
    let mut frac = false;
    if b.get(i) == Some(&b'.') {
        i += 1;
        frac = digits(&mut i);
    }
    if !whole && !frac {
        return false;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !digits(&mut i) {
            return false;
        }
    }
    i == b.len()
}

/// `s` as an RFC 4180 field: quoted, its quotes doubled, when it holds `,`, `"`, CR or LF.
fn push_csv_field(line: &mut String, s: &str) {
    if s.contains([',', '"', '\r', '\n']) {
        line.push('"');
        for c in s.chars() {
            if c == '"' {
                line.push('"');
            }
            line.push(c);
        }
        line.push('"');
    } else {
        line.push_str(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize)]
    struct Row {
        a: String,
        n: Option<f64>,
        b: bool,
        m: std::collections::BTreeMap<String, String>,
    }

    fn row(a: &str) -> Row {
        Row {
            a: a.into(),
            n: Some(1.5),
            b: true,
            m: [("x-account".to_string(), "1\"2".to_string())].into(),
        }
    }

    fn csv(rows: &[Row], cols: &[&str]) -> String {
        let mut w = RowWriter::new(Vec::new(), Format::Csv, cols).unwrap();
        for r in rows {
            w.row(r).unwrap();
        }
        String::from_utf8(w.into_inner()).unwrap()
    }

    #[test]
    fn csv_quotes_what_rfc_4180_asks_and_keeps_the_column_order() {
        let out = csv(
            &[row("plain"), row("a,b \"q\"\r\nnext")],
            &["n", "a", "missing", "b", "m"],
        );
        assert_eq!(
            out,
            "n,a,missing,b,m\r\n\
             1.5,plain,,true,\"{\"\"x-account\"\":\"\"1\\\"\"2\"\"}\"\r\n\
             1.5,\"a,b \"\"q\"\"\r\nnext\",,true,\"{\"\"x-account\"\":\"\"1\\\"\"2\"\"}\"\r\n"
        );
    }

    #[test]
    fn formulas_are_defused_and_numbers_are_not() {
        for f in [
            "=1+2",
            "+cmd|' /C calc'!A0",
            "-2+3",
            "@SUM(A1)",
            "\tx",
            "=HYPERLINK(\"x\")",
            "+",
            "-",
            "+49 30",
        ] {
            assert!(formula_like(f), "{f}");
        }
        for n in [
            "+4930123456",
            "-1.5",
            "12",
            "1e5",
            "+1.5E-3",
            "",
            "a=b",
            "sip:+49@x",
        ] {
            assert!(!formula_like(n), "{n}");
        }
        let out = csv(&[row("=cmd"), row("+4930123")], &["a"]);
        assert_eq!(out, "a\r\n'=cmd\r\n+4930123\r\n");
    }

    #[test]
    fn json_lines_carry_the_columns_in_order_unchanged() {
        let mut w =
            RowWriter::new(Vec::new(), Format::JsonLines, &["b", "a", "missing", "m"]).unwrap();
        w.row(&row("=x")).unwrap();
        assert_eq!(w.rows(), 1);
        let out = String::from_utf8(w.into_inner()).unwrap();
        assert_eq!(
            out,
            "{\"b\":true,\"a\":\"=x\",\"missing\":null,\"m\":{\"x-account\":\"1\\\"2\"}}\n"
        );
        assert!(
            RowWriter::new(Vec::new(), Format::Csv, &["a"])
                .unwrap()
                .row(&1)
                .is_err()
        );
        assert_eq!(Format::parse("JSONL").unwrap(), Format::JsonLines);
        assert!(Format::parse("xml").is_err());
    }
}
