//! What DuckDB's optimizer and a scan tell each other: filters DuckDB
//! pushes into a scan, as bounds that let a scan leave rows out, and the
//! exact statistics of an integer column, from which DuckDB answers an
//! ungrouped `MIN`, `MAX` or `COUNT(*)` without scanning.
//!
//! DuckLake's busiest query, `WHERE snapshot_id = (SELECT MAX(snapshot_id)
//! …)`, is a hash join; once the aggregate side is built DuckDB pushes its
//! value into the other side's scan as a dynamic filter. A bound here is
//! only ever a superset of what the filter keeps: the shim still applies
//! DuckDB's own filters to every row it emits, so a bound decides what a
//! scan need not hand over, never what a query sees.

use crate::catalog::Rows;

/// Rows whose cell in `column` is not an integer in `low..=high` may be left
/// out of the scan. NULL is outside every bound: the comparisons, IN lists
/// and join keys a bound comes from never keep a NULL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntBound {
    pub column: usize,
    pub low: i64,
    pub high: i64,
}

impl IntBound {
    fn admits(&self, rows: &Rows, row: usize) -> bool {
        rows.cell(row, self.column)
            .as_int()
            .is_some_and(|v| (self.low..=self.high).contains(&v))
    }
}

/// The indices of the rows every bound admits, in order; `None` when the
/// bounds admit every row (no selection to carry).
pub fn select(rows: &Rows, bounds: &[IntBound]) -> Option<Vec<u32>> {
    if bounds.is_empty() {
        return None;
    }
    let selected: Vec<u32> = (0..rows.len())
        .filter(|&row| bounds.iter().all(|b| b.admits(rows, row)))
        .map(|row| row as u32)
        .collect();
    (selected.len() < rows.len()).then_some(selected)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::rows::IntStats;
    use crate::catalog::Cell;

    fn rows() -> Rows {
        (0..6)
            .map(|i| {
                vec![
                    Cell::Int(i),
                    if i % 2 == 0 {
                        Cell::Null
                    } else {
                        Cell::Int(i * 10)
                    },
                ]
            })
            .collect::<Vec<_>>()
            .into()
    }

    #[test]
    fn a_bound_keeps_the_rows_inside_it_in_order() {
        let bound = IntBound {
            column: 0,
            low: 2,
            high: 4,
        };
        assert_eq!(select(&rows(), &[bound]), Some(vec![2, 3, 4]));
    }

    #[test]
    fn null_cells_are_outside_every_bound() {
        let bound = IntBound {
            column: 1,
            low: i64::MIN,
            high: i64::MAX,
        };
        assert_eq!(select(&rows(), &[bound]), Some(vec![1, 3, 5]));
    }

    #[test]
    fn several_bounds_all_apply() {
        let bounds = [
            IntBound {
                column: 0,
                low: 0,
                high: 3,
            },
            IntBound {
                column: 1,
                low: 0,
                high: 100,
            },
        ];
        assert_eq!(select(&rows(), &bounds), Some(vec![1, 3]));
    }

    #[test]
    fn no_bound_or_a_bound_that_admits_everything_selects_nothing_out() {
        assert_eq!(select(&rows(), &[]), None);
        let everything = IntBound {
            column: 0,
            low: 0,
            high: 5,
        };
        assert_eq!(select(&rows(), &[everything]), None);
    }

    #[test]
    fn a_bound_on_a_column_a_row_lacks_leaves_the_row_out() {
        let bound = IntBound {
            column: 9,
            low: 0,
            high: 0,
        };
        assert_eq!(select(&rows(), &[bound]), Some(vec![]));
    }

    #[test]
    fn int_stats_count_nulls_and_span_the_integers() {
        let stats = rows().int_stats(1);
        assert_eq!(
            stats,
            Some(IntStats {
                rows: 6,
                nulls: 3,
                range: Some((10, 50)),
            })
        );
    }

    #[test]
    fn int_stats_of_an_all_null_or_empty_column_have_no_range() {
        let all_null = rows().int_stats(7).expect("NULL past a row's end");
        assert_eq!((all_null.nulls, all_null.range), (6, None));
        let empty = Rows::from(Vec::<Vec<Cell>>::new()).int_stats(0);
        assert_eq!(
            empty,
            Some(IntStats {
                rows: 0,
                nulls: 0,
                range: None,
            })
        );
    }

    #[test]
    fn int_stats_follow_the_rows_through_appends_and_changes() {
        let mut kept = Rows::packed(rows().to_vec());
        assert_eq!(kept.int_stats(0).and_then(|s| s.range), Some((0, 5)));
        assert_eq!(kept.int_stats(1).map(|s| s.nulls), Some(3));
        // Appended rows are counted into what is known, as a recount would.
        kept.extend(&[vec![Cell::Int(40), Cell::Null], vec![Cell::Int(-1)]]);
        let appended = kept.int_stats(0).expect("integers");
        assert_eq!((appended.rows, appended.range), (8, Some((-1, 40))));
        assert_eq!(kept.int_stats(1).map(|s| s.nulls), Some(5));
        for column in 0..3 {
            assert_eq!(kept.clone().int_stats(column), kept.int_stats(column));
        }
        kept.extend(&[vec![Cell::Int(7), Cell::Text("seven".into())]]);
        assert_eq!(kept.int_stats(1), None);
        kept.change(|rows| rows[0][0] = Cell::Int(-3));
        assert_eq!(kept.int_stats(0).and_then(|s| s.range), Some((-3, 40)));
        kept.change(|rows| rows.truncate(1));
        assert_eq!(kept.int_stats(0).and_then(|s| s.range), Some((-3, -3)));
        assert_eq!(kept.clone().int_stats(0), kept.int_stats(0));
    }

    #[test]
    fn int_stats_refuse_a_column_that_is_not_all_integers() {
        let mixed: Rows = vec![vec![Cell::Int(1)], vec![Cell::Text("x".into())]].into();
        assert_eq!(mixed.int_stats(0), None);
    }
}
