//! Catalog rows as CSV or JSON, for a person or a script.

use moraine::catalog::Cell;
use std::io::{self, Write};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Csv,
    Json,
}

impl Format {
    pub fn parse(text: &str) -> Option<Format> {
        match text.to_ascii_lowercase().as_str() {
            "csv" => Some(Format::Csv),
            "json" => Some(Format::Json),
            _ => None,
        }
    }
}

/// How a column's cells are rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Plain,
    /// Microseconds since the epoch, shown as a UTC timestamp.
    Timestamp,
}

pub struct Table {
    pub name: String,
    pub columns: Vec<(String, Shape)>,
    pub rows: Vec<Vec<Cell>>,
}

/// One table as plain CSV (header, then rows); several as CSV blocks, each
/// preceded by a `# table` line and separated by a blank line. JSON: one
/// table is an array of objects; several are an object of such arrays under
/// `tables`, with `header` fields (snapshot, head) first.
pub fn write(
    out: &mut impl Write,
    format: Format,
    header: &[(&str, i64)],
    tables: &[Table],
    single: bool,
) -> io::Result<()> {
    match (format, single) {
        (Format::Csv, true) => tables.iter().try_for_each(|t| write_csv(out, t)),
        (Format::Csv, false) => {
            for (i, table) in tables.iter().enumerate() {
                if i > 0 {
                    writeln!(out)?;
                }
                writeln!(out, "# {}", table.name)?;
                write_csv(out, table)?;
            }
            Ok(())
        }
        (Format::Json, true) => {
            for table in tables {
                write_json_rows(out, table, "")?;
                writeln!(out)?;
            }
            Ok(())
        }
        (Format::Json, false) => {
            writeln!(out, "{{")?;
            for (name, value) in header {
                writeln!(out, "  {}: {value},", json_string(name))?;
            }
            writeln!(out, "  \"tables\": {{")?;
            for (i, table) in tables.iter().enumerate() {
                write!(out, "    {}: ", json_string(&table.name))?;
                write_json_rows(out, table, "    ")?;
                writeln!(out, "{}", if i + 1 < tables.len() { "," } else { "" })?;
            }
            writeln!(out, "  }}")?;
            writeln!(out, "}}")
        }
    }
}

fn write_csv(out: &mut impl Write, table: &Table) -> io::Result<()> {
    let header: Vec<String> = table.columns.iter().map(|(n, _)| csv_field(n)).collect();
    writeln!(out, "{}", header.join(","))?;
    for row in &table.rows {
        let fields: Vec<String> = row
            .iter()
            .zip(&table.columns)
            .map(|(cell, (_, shape))| match cell {
                Cell::Null => String::new(),
                other => csv_field(&text(other, *shape)),
            })
            .collect();
        writeln!(out, "{}", fields.join(","))?;
    }
    Ok(())
}

fn write_json_rows(out: &mut impl Write, table: &Table, indent: &str) -> io::Result<()> {
    if table.rows.is_empty() {
        return write!(out, "[]");
    }
    writeln!(out, "[")?;
    for (i, row) in table.rows.iter().enumerate() {
        let fields: Vec<String> = row
            .iter()
            .zip(&table.columns)
            .map(|(cell, (name, shape))| {
                format!("{}: {}", json_string(name), json_value(cell, *shape))
            })
            .collect();
        let comma = if i + 1 < table.rows.len() { "," } else { "" };
        writeln!(out, "{indent}  {{{}}}{comma}", fields.join(", "))?;
    }
    write!(out, "{indent}]")
}

/// A cell as text: integers, booleans, text as is; opaque DuckDB values
/// (inlined user columns) as hex of their serialized bytes.
fn text(cell: &Cell, shape: Shape) -> String {
    match (cell, shape) {
        (Cell::Null, _) => String::new(),
        (Cell::Int(micros), Shape::Timestamp) => timestamp(*micros),
        (Cell::Int(v), _) => v.to_string(),
        (Cell::Bool(b), _) => b.to_string(),
        (Cell::Text(t), _) => t.clone(),
        (Cell::Blob(b), _) => b.iter().map(|x| format!("{x:02x}")).collect(),
    }
}

fn json_value(cell: &Cell, shape: Shape) -> String {
    match (cell, shape) {
        (Cell::Null, _) => "null".into(),
        (Cell::Int(v), Shape::Plain) => v.to_string(),
        (Cell::Bool(b), _) => b.to_string(),
        (other, _) => json_string(&text(other, shape)),
    }
}

fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) || text.starts_with('#') {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

pub fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Microseconds since the epoch as DuckDB prints a TIMESTAMPTZ in UTC:
/// `2025-01-31 12:34:56.789012+00`.
pub fn timestamp(micros: i64) -> String {
    let days = micros.div_euclid(86_400_000_000);
    let of_day = micros.rem_euclid(86_400_000_000);
    let (year, month, day) = civil_from_days(days);
    let seconds = of_day / 1_000_000;
    let fraction = of_day % 1_000_000;
    let clock = format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    );
    if fraction == 0 {
        format!("{clock}+00")
    } else {
        format!("{clock}.{fraction:06}+00")
    }
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_print_as_duckdb_prints_them_in_utc() {
        assert_eq!(timestamp(0), "1970-01-01 00:00:00+00");
        assert_eq!(
            timestamp(1_700_000_000_123_456),
            "2023-11-14 22:13:20.123456+00"
        );
        assert_eq!(timestamp(951_782_400_000_000), "2000-02-29 00:00:00+00");
        assert_eq!(timestamp(-1), "1969-12-31 23:59:59.999999+00");
    }

    #[test]
    fn csv_and_json_escape_what_they_must() {
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(json_string("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\n\\u0001\"");
    }

    #[test]
    fn a_single_table_is_plain_csv_and_a_json_array() {
        let table = Table {
            name: "t".into(),
            columns: vec![("id".into(), Shape::Plain), ("at".into(), Shape::Timestamp)],
            rows: vec![
                vec![Cell::Int(1), Cell::Int(0)],
                vec![Cell::Int(2), Cell::Null],
            ],
        };
        let mut csv = Vec::new();
        write(
            &mut csv,
            Format::Csv,
            &[],
            std::slice::from_ref(&table),
            true,
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(csv).unwrap(),
            "id,at\n1,1970-01-01 00:00:00+00\n2,\n"
        );
        let mut json = Vec::new();
        write(&mut json, Format::Json, &[], &[table], true).unwrap();
        assert_eq!(
            String::from_utf8(json).unwrap(),
            "[\n  {\"id\": 1, \"at\": \"1970-01-01 00:00:00+00\"},\n  {\"id\": 2, \"at\": null}\n]\n"
        );
    }
}
