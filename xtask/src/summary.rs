//! Pass/fail counts: parsing runner output and adding stages up.

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counts {
    pub passed: u64,
    pub failed: u64,
    /// The runners' own lines naming each failed test, repeated in the
    /// summary: a long run's log is often seen only by its tail.
    pub failures: Vec<String>,
}

impl Counts {
    pub fn new(passed: u64, failed: u64) -> Counts {
        Counts {
            passed,
            failed,
            failures: Vec::new(),
        }
    }

    pub fn add(mut self, other: Counts) -> Counts {
        self.passed += other.passed;
        self.failed += other.failed;
        self.failures.extend(other.failures);
        self
    }

    /// Keeps the lines of `output` that name a failed test: the runners'
    /// `FAIL name ...` and cargo's `test name ... FAILED`. A runner that
    /// repeats a failure with its reason at the end is shown by that last
    /// line.
    pub fn with_failures_from(mut self, output: &str) -> Counts {
        for line in output.lines().map(str::trim) {
            let is_failure = line.starts_with("FAIL ")
                || (line.starts_with("test ") && line.ends_with(" ... FAILED"));
            if !is_failure {
                continue;
            }
            let name = |l: &str| {
                l.split_whitespace()
                    .nth(1)
                    .map(|n| n.trim_end_matches(':').to_string())
            };
            match self
                .failures
                .iter_mut()
                .find(|seen| name(seen) == name(line))
            {
                Some(seen) => *seen = line.to_string(),
                None => self.failures.push(line.to_string()),
            }
        }
        self
    }

    pub fn into_result(self) -> Result<(), String> {
        if self.failed == 0 {
            Ok(())
        } else {
            // The runner already printed `N passed, M failed` as its last line: add nothing after it.
            Err(String::new())
        }
    }
}

/// The last line of the exact form `N passed, M failed` (optionally `, K skipped`).
pub fn last_summary(output: &str) -> Option<Counts> {
    output.lines().rev().find_map(parse_summary_line)
}

fn parse_summary_line(line: &str) -> Option<Counts> {
    let mut parts = line.trim().split(", ");
    let passed = parts.next()?.strip_suffix(" passed")?.parse().ok()?;
    let failed = parts.next()?.strip_suffix(" failed")?.parse().ok()?;
    match parts.next() {
        None => Some(Counts::new(passed, failed)),
        Some(rest) if rest.ends_with(" skipped") && parts.next().is_none() => {
            Some(Counts::new(passed, failed))
        }
        Some(_) => None,
    }
}

/// Sums cargo's `test result: ok. N passed; M failed; ...` lines (unit, integration, doc tests).
pub fn cargo_test_totals(output: &str) -> Counts {
    let mut total = Counts::default();
    for line in output.lines() {
        let Some(rest) = line.trim().strip_prefix("test result: ") else {
            continue;
        };
        let mut c = Counts::default();
        for field in rest.split(';') {
            let field = field.trim();
            let field = field.rsplit(". ").next().unwrap_or(field); // drop "ok. " / "FAILED. "
            let mut words = field.split_whitespace();
            let (Some(n), Some(what)) = (words.next(), words.next()) else {
                continue;
            };
            let Ok(n) = n.parse::<u64>() else { continue };
            match what {
                "passed" => c.passed = n,
                "failed" => c.failed = n,
                _ => {}
            }
        }
        total = total.add(c);
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_named_once_by_their_last_line() {
        let out = "ok   a.py::t1 (0.1s)\nFAIL a.py::t2 (0.2s)\n  | boom\n\
                   test lib::x ... FAILED\nFAIL a.py::t2: AssertionError: boom\n";
        let counts = Counts::new(1, 2).with_failures_from(out);
        assert_eq!(
            counts.failures,
            vec![
                "FAIL a.py::t2: AssertionError: boom",
                "test lib::x ... FAILED"
            ]
        );
    }

    #[test]
    fn summary_line_is_found_last() {
        let out = "1 passed, 0 failed\nnoise\n3 passed, 2 failed\n";
        assert_eq!(last_summary(out), Some(Counts::new(3, 2)));
    }

    #[test]
    fn summary_line_allows_skipped_suffix_and_rejects_other_text() {
        assert_eq!(
            last_summary("4 passed, 0 failed, 1 skipped"),
            Some(Counts::new(4, 0))
        );
        assert_eq!(last_summary("FAIL: 4 passed, 0 failed but more"), None);
        assert_eq!(last_summary("nothing here"), None);
    }

    #[test]
    fn cargo_test_results_are_summed() {
        let out = "\
running 3 tests
test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s
test result: FAILED. 5 passed; 2 failed; 1 ignored; 0 measured; 0 filtered out; finished in 1.20s
   Doc-tests moraine
test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s
";
        assert_eq!(cargo_test_totals(out), Counts::new(8, 2));
    }
}
