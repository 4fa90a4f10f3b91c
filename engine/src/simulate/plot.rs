//! `--plot FILE.svg`: one panel per signal that a threshold watches, the
//! signal against its threshold over time, with each eviction marked.

use super::record::Simulation;
use plotters::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use thiserror::Error;

/// Why the chart could not be drawn.
#[derive(Debug, Error)]
#[error("cannot draw the chart to {path}")]
pub struct PlotError {
    path: String,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

/// Signals measured in bytes are drawn in MiB.
fn scale(signal: &str) -> (f64, &'static str) {
    if signal.starts_with("memory") || signal.contains("fs.") {
        (1048576.0, "MiB")
    } else {
        (1.0, "")
    }
}

/// Draws `simulation` to `path` as SVG.
///
/// # Errors
/// The file cannot be written.
pub fn draw(simulation: &Simulation, path: &Path) -> Result<(), PlotError> {
    draw_panels(simulation, path).map_err(|source| PlotError {
        path: path.display().to_string(),
        source,
    })
}

fn draw_panels(
    simulation: &Simulation,
    path: &Path,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // memory.available, and every signal whose threshold is met at some point;
    // each eviction is marked on the panel of the signal its strategy watches.
    let mut signals: BTreeSet<&str> = ["memory.available"].into();
    let mut watched: BTreeMap<&str, &str> = BTreeMap::new();
    for threshold in simulation.steps.iter().flat_map(|s| &s.thresholds) {
        watched.insert(&threshold.strategy, &threshold.signal);
        if threshold.met != "not-met" {
            signals.insert(&threshold.signal);
        }
    }
    let root = SVGBackend::new(path, (960, 320 * signals.len() as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let end = simulation.steps.last().map_or(1.0, |s| s.t.max(1.0));
    for (area, signal) in root.split_evenly((signals.len(), 1)).iter().zip(signals) {
        let (unit, unit_name) = scale(signal);
        let series: Vec<(f64, f64)> = simulation
            .steps
            .iter()
            .filter_map(|s| s.signals.get(signal).map(|v| (s.t, v / unit)))
            .collect();
        let thresholds: Vec<(f64, f64)> = simulation
            .steps
            .iter()
            .filter_map(|s| {
                s.thresholds
                    .iter()
                    .find(|t| t.signal == signal)
                    .map(|t| (s.t, t.threshold / unit))
            })
            .collect();
        let top = series
            .iter()
            .chain(&thresholds)
            .map(|(_, v)| *v)
            .fold(1.0, f64::max)
            * 1.1;
        let mut chart = ChartBuilder::on(area)
            .caption(format!("{signal} {unit_name}"), ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(30)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..end, 0.0..top)?;
        chart.configure_mesh().x_desc("seconds").draw()?;
        chart
            .draw_series(LineSeries::new(series.clone(), BLUE.stroke_width(2)))?
            .label(signal)
            .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLUE.stroke_width(2)));
        if !thresholds.is_empty() {
            chart
                .draw_series(LineSeries::new(thresholds, RED.stroke_width(1)))?
                .label("threshold")
                .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], RED));
        }
        let at = |t: f64| {
            series
                .iter()
                .rev()
                .find(|(s, _)| *s <= t)
                .map_or(0.0, |(_, v)| *v)
        };
        chart
            .draw_series(
                simulation
                    .evictions
                    .iter()
                    .filter(|e| watched.get(e.strategy.as_str()) == Some(&signal))
                    .map(|e| Cross::new((e.at, at(e.at)), 6, BLACK.stroke_width(2))),
            )?
            .label("eviction")
            .legend(|(x, y)| Cross::new((x + 8, y), 5, BLACK));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}
