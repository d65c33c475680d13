//! ElasticFlow's throughput format: one CSV per model, rows global batch
//! sizes, columns GPU counts, cells iterations/s. Parsing a file into a
//! [`Grid`] and looking up a batch and worker count in it.

use serde::{Deserialize, Serialize};

use crate::throughput::{Rate, Throughput, ThroughputError, across_workers};

/// ElasticFlow's grid: iterations/s per global batch and GPU count. Its cells
/// already include the gradient sync over the measuring datacentre's fabric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Grid {
    /// Global batch sizes of the rows, ascending.
    pub batches: Vec<u32>,
    /// GPU counts of the columns, ascending.
    pub gpus: Vec<u32>,
    /// Iterations/s per row and column; `None` where not measured (empty, 0 or `nan` in the file).
    pub iters_per_s: Vec<Vec<Option<f64>>>,
}

impl Grid {
    /// Parses one ElasticFlow CSV; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<Grid, ThroughputError> {
        let cell_err = |line, column, value: &str, what| ThroughputError::Cell {
            file: file.to_string(),
            line,
            column,
            value: value.to_string(),
            what,
        };
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let (hline, header) = lines.next().ok_or_else(|| ThroughputError::Empty {
            file: file.to_string(),
        })?;
        let mut gpus = Vec::new();
        for (c, cell) in header.split(',').enumerate().skip(1) {
            let g: u32 = cell.trim().parse().map_err(|_| {
                cell_err(
                    hline + 1,
                    c + 1,
                    cell,
                    "GPU count is not a positive integer",
                )
            })?;
            if g == 0 || gpus.last().is_some_and(|&p| p >= g) {
                return Err(cell_err(
                    hline + 1,
                    c + 1,
                    cell,
                    "GPU counts must be positive and ascending",
                ));
            }
            gpus.push(g);
        }
        if gpus.is_empty() {
            return Err(cell_err(
                hline + 1,
                1,
                header,
                "header has no GPU-count columns",
            ));
        }
        let mut rows: Vec<(u32, Vec<Option<f64>>)> = Vec::new();
        for (i, line) in lines {
            let cells: Vec<&str> = line.split(',').collect();
            if cells.len() != gpus.len() + 1 {
                return Err(cell_err(
                    i + 1,
                    cells.len().min(gpus.len() + 1),
                    line,
                    "row length differs from the header",
                ));
            }
            let batch: u32 = cells[0]
                .trim()
                .parse()
                .ok()
                .filter(|&b| b > 0)
                .ok_or_else(|| {
                    cell_err(i + 1, 1, cells[0], "batch size is not a positive integer")
                })?;
            let mut vals = Vec::with_capacity(gpus.len());
            for (c, cell) in cells.iter().enumerate().skip(1) {
                if cell.trim().is_empty() {
                    vals.push(None);
                    continue;
                }
                let v: f64 = cell
                    .trim()
                    .parse()
                    .map_err(|_| cell_err(i + 1, c + 1, cell, "throughput is not a number"))?;
                if v < 0.0 {
                    return Err(cell_err(i + 1, c + 1, cell, "throughput is negative"));
                }
                vals.push((v.is_finite() && v > 0.0).then_some(v));
            }
            if vals.iter().any(Option::is_some) {
                rows.push((batch, vals));
            }
        }
        if rows.is_empty() {
            return Err(ThroughputError::Empty {
                file: file.to_string(),
            });
        }
        rows.sort_by_key(|r| r.0);
        Ok(Grid {
            batches: rows.iter().map(|r| r.0).collect(),
            gpus,
            iters_per_s: rows.into_iter().map(|r| r.1).collect(),
        })
    }

    /// Iterations/s at global batch `batch` on `workers` devices.
    ///
    /// Fallbacks (each marks the answer estimated): a batch size without a row
    /// uses the nearest row (by ratio) at constant samples/s,
    /// `it/s(b) = it/s(b_row) × b_row / b`; worker counts between, above or
    /// below the measured columns as in [`across_workers`].
    pub(crate) fn lookup(&self, batch: u32, workers: u32) -> Option<Throughput> {
        let exact = self.batches.partition_point(|&b| b < batch);
        let row = if self.batches.get(exact) == Some(&batch) {
            exact
        } else {
            (0..self.batches.len()).min_by(|&a, &b| {
                let d = |i: usize| (f64::from(self.batches[i]) / f64::from(batch)).ln().abs();
                d(a).total_cmp(&d(b))
            })?
        };
        let mut below = None;
        let mut above = None;
        for (&g, v) in self.gpus.iter().zip(&self.iters_per_s[row]) {
            let Some(v) = *v else { continue };
            let rate = Rate {
                iters_per_s: v,
                sync_s: None,
            };
            if g <= workers {
                below = Some((g, rate));
            } else if above.is_none() {
                above = Some((g, rate));
            }
        }
        let t = across_workers(workers, below, above)?;
        let row_batch = self.batches[row];
        Some(Throughput {
            iters_per_s: t.iters_per_s * f64::from(row_batch) / f64::from(batch),
            estimated: t.estimated || row_batch != batch,
            ..t
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_file_line_and_column() {
        let err = Grid::parse("x.csv", "global_batch_size,1,2\n64,1.0,fast\n").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("x.csv:2:3:") && msg.contains("not a number"),
            "{msg}"
        );
        let err = Grid::parse("y.csv", "global_batch_size,1,1\n").unwrap_err();
        assert!(err.to_string().starts_with("y.csv:1:3:"), "{err}");
        let err = Grid::parse("z.csv", "global_batch_size,1\n64,0\n").unwrap_err();
        assert!(matches!(err, ThroughputError::Empty { .. }), "{err}");
        let err = Grid::parse("w.csv", "global_batch_size,1,2\n64,1.0\n").unwrap_err();
        assert!(err.to_string().contains("row length"), "{err}");
    }
}
