//! The DuckDB types of DuckLake's catalog columns.

pub use crate::store::value::{Cell, Row};

/// The DuckDB type of a catalog column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    BigInt,
    Varchar,
    Boolean,
    TimestampTz,
    Uuid,
}

impl ColumnType {
    pub fn sql_name(self) -> &'static str {
        match self {
            ColumnType::BigInt => "BIGINT",
            ColumnType::Varchar => "VARCHAR",
            ColumnType::Boolean => "BOOLEAN",
            ColumnType::TimestampTz => "TIMESTAMP WITH TIME ZONE",
            ColumnType::Uuid => "UUID",
        }
    }

    /// Parses the type names DuckDB prints for a bound CREATE TABLE.
    pub fn parse(name: &str) -> Option<Self> {
        match name.trim().to_ascii_uppercase().as_str() {
            "BIGINT" | "INT8" | "LONG" => Some(ColumnType::BigInt),
            "VARCHAR" | "TEXT" | "STRING" => Some(ColumnType::Varchar),
            "BOOLEAN" | "BOOL" => Some(ColumnType::Boolean),
            "TIMESTAMP WITH TIME ZONE" | "TIMESTAMPTZ" => Some(ColumnType::TimestampTz),
            "UUID" => Some(ColumnType::Uuid),
            _ => None,
        }
    }

    /// Whether a cell fits this column (NULL fits everywhere).
    pub fn accepts(self, cell: &Cell) -> bool {
        matches!(
            (self, cell),
            (_, Cell::Null)
                | (ColumnType::BigInt, Cell::Int(_))
                | (ColumnType::TimestampTz, Cell::Int(_))
                | (ColumnType::Boolean, Cell::Bool(_))
                | (ColumnType::Varchar, Cell::Text(_))
                | (ColumnType::Uuid, Cell::Text(_))
        )
    }
}
