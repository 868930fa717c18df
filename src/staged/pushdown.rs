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
use std::ops::Range;

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

    /// The rows of `within` this bound can admit: found by bisection where
    /// the column ascends, so a scan costs the rows it keeps rather than the
    /// rows the table holds; `within` itself elsewhere.
    fn narrow(&self, rows: &Rows, within: Range<usize>) -> Range<usize> {
        if !rows.ascending(self.column) {
            return within;
        }
        // An ascending column holds integers only.
        let value = |row: usize| rows.cell(row, self.column).as_int().unwrap_or(i64::MIN);
        let start = first_where(within.clone(), |row| value(row) >= self.low);
        let end = first_where(start..within.end, |row| value(row) > self.high);
        start..end
    }
}

/// The first index of `range` at which `reached` holds, or its end;
/// `reached` must hold from some index of `range` on and not before.
fn first_where(range: Range<usize>, reached: impl Fn(usize) -> bool) -> usize {
    let (mut low, mut high) = (range.start, range.end);
    while low < high {
        let middle = low + (high - low) / 2;
        if reached(middle) {
            high = middle;
        } else {
            low = middle + 1;
        }
    }
    low
}

/// The indices of the rows every bound admits, in order; `None` when the
/// bounds admit every row (no selection to carry).
pub fn select(rows: &Rows, bounds: &[IntBound]) -> Option<Vec<u32>> {
    if bounds.is_empty() {
        return None;
    }
    let within = bounds
        .iter()
        .fold(0..rows.len(), |within, bound| bound.narrow(rows, within));
    let selected: Vec<u32> = within
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
                ascending: false,
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
                ascending: true,
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

    /// What `select` must return: every row the bounds admit, found by
    /// reading each.
    fn read_one_by_one(rows: &Rows, bounds: &[IntBound]) -> Option<Vec<u32>> {
        let kept: Vec<u32> = (0..rows.len())
            .filter(|&row| bounds.iter().all(|b| b.admits(rows, row)))
            .map(|row| row as u32)
            .collect();
        (kept.len() < rows.len()).then_some(kept)
    }

    #[test]
    fn bounds_on_ascending_columns_keep_what_reading_every_row_keeps() {
        // Column 0 ascends with repeats, column 1 ascends strictly, column 2
        // does not ascend, column 3 has a NULL.
        let rows = Rows::packed(
            (0..40)
                .map(|i| {
                    vec![
                        Cell::Int(i / 3),
                        Cell::Int(i * 2),
                        Cell::Int((i * 7) % 11),
                        if i == 20 { Cell::Null } else { Cell::Int(i) },
                    ]
                })
                .collect(),
        );
        assert!(rows.ascending(0) && rows.ascending(1));
        assert!(!rows.ascending(2) && !rows.ascending(3));
        let edges = [i64::MIN, -1, 0, 1, 5, 6, 13, 40, 78, 79, 100, i64::MAX];
        for column in 0..4 {
            for &low in &edges {
                for &high in &edges {
                    let bound = IntBound { column, low, high };
                    let other = IntBound {
                        column: (column + 1) % 4,
                        low: 3,
                        high: 60,
                    };
                    for bounds in [vec![bound], vec![bound, other], vec![other, bound]] {
                        assert_eq!(
                            select(&rows, &bounds),
                            read_one_by_one(&rows, &bounds),
                            "{bounds:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_column_that_stops_ascending_is_read_row_by_row() {
        let mut rows = Rows::packed((0..10).map(|i| vec![Cell::Int(i)]).collect());
        assert!(rows.ascending(0));
        rows.extend(&[vec![Cell::Int(3)]]);
        assert!(!rows.ascending(0));
        let bound = IntBound {
            column: 0,
            low: 3,
            high: 3,
        };
        assert_eq!(select(&rows, &[bound]), Some(vec![3, 10]));
        let mut rows = Rows::packed((0..10).map(|i| vec![Cell::Int(i)]).collect());
        rows.extend(&[vec![Cell::Int(10)], vec![Cell::Null]]);
        assert!(!rows.ascending(0));
        assert_eq!(select(&rows, &[bound]), Some(vec![3]));
    }

    #[test]
    fn int_stats_refuse_a_column_that_is_not_all_integers() {
        let mixed: Rows = vec![vec![Cell::Int(1)], vec![Cell::Text("x".into())]].into();
        assert_eq!(mixed.int_stats(0), None);
    }
}
