//! Pressure stall information: `/proc/pressure/{memory,cpu,io}` and a
//! cgroup's `*.pressure` files.

use super::error::{SignalError, malformed, read};
use std::path::Path;

/// One line of a pressure file.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PsiLine {
    /// Percentage of time stalled over the last 10 s.
    pub avg10: f64,
    /// Over the last 60 s.
    pub avg60: f64,
    /// Over the last 300 s.
    pub avg300: f64,
    /// Total stall time, in microseconds.
    pub total: u64,
}

/// A whole pressure file.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pressure {
    /// Some tasks stalled.
    pub some: PsiLine,
    /// All tasks stalled (absent for cpu on older kernels).
    pub full: Option<PsiLine>,
}

impl Pressure {
    /// Reads a pressure file.
    ///
    /// # Errors
    /// The file is missing or malformed.
    pub fn read(path: &Path) -> Result<Self, SignalError> {
        Self::parse(path, &read(path)?)
    }

    pub(crate) fn parse(path: &Path, text: &str) -> Result<Self, SignalError> {
        let line = |kind: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(kind))
                .map(|rest| parse_line(path, rest))
        };
        let some = line("some ").ok_or_else(|| malformed(path, "no `some` line"))??;
        let full = line("full ").transpose()?;
        Ok(Self { some, full })
    }
}

fn parse_line(path: &Path, fields: &str) -> Result<PsiLine, SignalError> {
    let value = |key: &str| {
        fields
            .split_whitespace()
            .find_map(|f| f.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
            .ok_or_else(|| malformed(path, format!("no {key}")))
    };
    // A share of time: a number from 0 to 100 (`inf`, `NaN` and `-1`
    // parse as floats, and are not).
    let avg = |key: &str| -> Result<f64, SignalError> {
        value(key)?
            .parse()
            .ok()
            .filter(|v: &f64| (0.0..=100.0).contains(v))
            .ok_or_else(|| malformed(path, format!("{key} is not a share from 0 to 100")))
    };
    Ok(PsiLine {
        avg10: avg("avg10")?,
        avg60: avg("avg60")?,
        avg300: avg("avg300")?,
        total: value("total")?
            .parse()
            .map_err(|_| malformed(path, "total is not a number"))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_this_machines_pressure_files() {
        for text in [
            include_str!("fixtures/pressure-memory"),
            include_str!("fixtures/pressure-io"),
        ] {
            let pressure = Pressure::parse(Path::new("p"), text).unwrap();
            assert!(pressure.full.is_some());
        }
        let cpu = Pressure::parse(Path::new("p"), include_str!("fixtures/pressure-cpu")).unwrap();
        assert_eq!(cpu.some.total, 191_509_922);
        assert!((cpu.some.avg60 - 5.23).abs() < 1e-9);
    }

    #[test]
    fn old_kernels_without_full_and_garbage_are_told_apart() {
        let some_only = "some avg10=1.00 avg60=2.00 avg300=3.00 total=4\n";
        assert_eq!(
            Pressure::parse(Path::new("p"), some_only).unwrap().full,
            None
        );
        let error =
            Pressure::parse(Path::new("p"), "some avg10=x avg60=1 avg300=1 total=1").unwrap_err();
        assert_eq!(error.to_string(), "p: avg10 is not a share from 0 to 100");
        assert!(Pressure::parse(Path::new("p"), "").is_err());
    }
}
