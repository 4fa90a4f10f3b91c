//! `--plot FILE.svg`: a chart that tells the simulation's story without the
//! text. One panel per signal a threshold watches: the signal with the pods'
//! usage stacked above it up to the node's capacity (so the gap below each
//! band is what that pod left free), the soft and hard thresholds, the spans
//! where a condition held shaded, and each eviction marked with its pod and
//! strategy until the pod was gone. Below, one lane per kind of other
//! decision: config changes, the sorter's refusals, policies that faulted or
//! declined. `data` derives all of it; this module only draws.

mod data;

use super::record::Simulation;
use data::{Lane, LaneMark, Level, Panel};
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::collections::BTreeSet;
use std::path::Path;
use thiserror::Error;

/// Why the chart could not be drawn.
#[derive(Debug, Error)]
#[error("cannot draw the chart to {path}")]
pub(crate) struct PlotError {
    path: String,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

type DrawResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

const WIDTH: u32 = 1200;
const LEGEND_WIDTH: u32 = 280;
const PANEL_HEIGHT: u32 = 420;
/// Width of the y axis' labels, the same on every chart so their time axes line up.
const Y_LABELS_PX: u32 = 110;
/// Height of one row of labels on a lane.
const LANE_ROW_PX: u32 = 22;
/// Roughly how wide a character of a label is.
const LABEL_CHAR_PX: f64 = 6.6;
/// Longest label drawn on a lane; the text output has the whole of it.
const LANE_LABEL: usize = 90;

const SIGNAL: RGBColor = RGBColor(31, 90, 200);
const HARD: RGBColor = RGBColor(210, 30, 30);
const SOFT: RGBColor = RGBColor(235, 140, 0);
const CONDITION: RGBColor = RGBColor(255, 80, 80);
const SYSTEM: RGBColor = RGBColor(170, 170, 170);
const DRY_RUN: RGBColor = RGBColor(130, 60, 170);

/// Draws `simulation` to `path` as SVG.
///
/// # Errors
/// The file cannot be written.
pub(crate) fn draw(simulation: &Simulation, path: &Path) -> Result<(), PlotError> {
    draw_all(simulation, path).map_err(|source| PlotError {
        path: path.display().to_string(),
        source,
    })
}

fn draw_all(simulation: &Simulation, path: &Path) -> DrawResult {
    let panels = data::panels(simulation);
    let lane_marks = data::lane_marks(&simulation.steps);
    let lanes: Vec<Lane> = lane_marks
        .iter()
        .map(|m| m.lane)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let end = simulation.steps.last().map_or(1.0, |s| s.t.max(1.0));
    // Pixels per second on the lanes' x axis, near enough to lay out labels.
    let px_per_second = f64::from(WIDTH - LEGEND_WIDTH - Y_LABELS_PX - 40) / end;
    let (rows, lane_rows) = rows(&lanes, &lane_marks, px_per_second);
    let lanes_height = if lanes.is_empty() {
        0
    } else {
        lanes_height(lane_rows.iter().sum())
    };
    let height = PANEL_HEIGHT * panels.len() as u32 + lanes_height;
    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let (upper, lower) = root.split_vertically(PANEL_HEIGHT * panels.len() as u32);
    // A pod has the same colour on every panel.
    let pods = data::pods(simulation);
    let colour = |band: &str| match pods.iter().position(|p| *p == band) {
        Some(i) => Palette99::pick(i).mix(0.45),
        None if band == "system" => SYSTEM.mix(0.35),
        None => SYSTEM.mix(0.7),
    };
    for (area, panel) in upper.split_evenly((panels.len(), 1)).iter().zip(&panels) {
        let (plot, legend) = area.split_horizontally(WIDTH - LEGEND_WIDTH);
        draw_panel(&plot, &legend, panel, &colour, end)?;
    }
    if !lanes.is_empty() {
        let (plot, _) = lower.split_horizontally(WIDTH - LEGEND_WIDTH);
        draw_lanes(&plot, &lanes, &lane_marks, (&rows, &lane_rows), end)?;
    }
    root.present()?;
    Ok(())
}

/// What a legend entry looks like.
enum Swatch {
    Line(RGBColor, u32),
    Fill(RGBAColor),
    Cross,
    Circle(RGBColor),
}

fn draw_panel(
    plot: &DrawingArea<SVGBackend<'_>, Shift>,
    legend: &DrawingArea<SVGBackend<'_>, Shift>,
    panel: &Panel,
    colour: &dyn Fn(&str) -> RGBAColor,
    end: f64,
) -> DrawResult {
    let ceiling = panel
        .bands
        .iter()
        .flat_map(|(_, _, upper)| upper)
        .chain(&panel.line)
        .chain(panel.thresholds.iter().flat_map(|l| &l.points))
        .map(|(_, v)| *v)
        .fold(1.0, f64::max);
    let top = ceiling * 1.1;
    // Whole numbers, unless the signal is a small fraction.
    let decimals = if ceiling < 10.0 { 2 } else { 0 };
    let caption = match panel.unit.1 {
        "" => panel.signal.clone(),
        unit => format!("{} ({unit})", panel.signal),
    };
    let mut chart = ChartBuilder::on(plot)
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(34)
        .y_label_area_size(Y_LABELS_PX)
        .build_cartesian_2d(0.0..end, 0.0..top)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .light_line_style(WHITE.mix(0.0))
        .y_label_formatter(&|v| format!("{v:.decimals$}"))
        .draw()?;
    let mut entries: Vec<(Swatch, String)> = Vec::new();
    draw_bands(&mut chart, panel, colour, &mut entries)?;
    draw_spans(&mut chart, panel, (ceiling, top), &mut entries)?;
    draw_thresholds(&mut chart, panel, &mut entries)?;
    draw_marks(&mut chart, panel, end, &mut entries)?;
    draw_legend(legend, &entries)
}

/// The chart of one panel: time against the signal's unit.
type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// A strip along the top, above `ceiling`, where a condition held.
fn draw_spans(
    chart: &mut Chart<'_, '_>,
    panel: &Panel,
    (ceiling, top): (f64, f64),
    entries: &mut Vec<(Swatch, String)>,
) -> DrawResult {
    let font = ("sans-serif", 12).into_font();
    for span in &panel.spans {
        chart.draw_series(std::iter::once(Rectangle::new(
            [(span.from, ceiling * 1.03), (span.to, top)],
            CONDITION.mix(0.35).filled(),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            span.condition.clone(),
            (span.from, top),
            font.clone(),
        )))?;
    }
    let conditions: BTreeSet<&str> = panel.spans.iter().map(|s| s.condition.as_str()).collect();
    for condition in conditions {
        entries.push((
            Swatch::Fill(CONDITION.mix(0.35)),
            format!("{condition} reported"),
        ));
    }
    Ok(())
}

/// The signal's area and line, and what each pod and the system took from it above.
fn draw_bands(
    chart: &mut Chart<'_, '_>,
    panel: &Panel,
    colour: &dyn Fn(&str) -> RGBAColor,
    entries: &mut Vec<(Swatch, String)>,
) -> DrawResult {
    let mut band = |lower: &[(f64, f64)], upper: &[(f64, f64)], color: RGBAColor| {
        let outline: Vec<(f64, f64)> = lower.iter().chain(upper.iter().rev()).copied().collect();
        chart.draw_series(std::iter::once(Polygon::new(outline, color.filled())))?;
        DrawResult::Ok(())
    };
    let floor: Vec<(f64, f64)> = panel.line.iter().map(|(t, _)| (*t, 0.0)).collect();
    band(&floor, &panel.line, SIGNAL.mix(0.12))?;
    entries.push((Swatch::Line(SIGNAL, 2), panel.signal.clone()));
    for (name, lower, upper) in &panel.bands {
        let color = colour(name);
        band(lower, upper, color)?;
        entries.push((Swatch::Fill(color), name.clone()));
    }
    chart.draw_series(LineSeries::new(
        panel.line.iter().copied(),
        SIGNAL.stroke_width(2),
    ))?;
    Ok(())
}

/// The thresholds: hard solid, soft dashed, one never met thin.
fn draw_thresholds(
    chart: &mut Chart<'_, '_>,
    panel: &Panel,
    entries: &mut Vec<(Swatch, String)>,
) -> DrawResult {
    let strategies: BTreeSet<&str> = panel
        .thresholds
        .iter()
        .map(|l| l.strategy.as_str())
        .collect();
    for line in &panel.thresholds {
        let (color, width, name) = match line.level {
            Level::Hard => (HARD, 2, "hard threshold"),
            Level::Soft => (SOFT, 2, "soft threshold"),
            Level::Unmet => (HARD, 1, "threshold (never met)"),
        };
        let points = line.points.iter().copied();
        if line.level == Level::Soft {
            chart.draw_series(DashedLineSeries::new(
                points,
                8,
                5,
                color.stroke_width(width),
            ))?;
        } else {
            chart.draw_series(LineSeries::new(points, color.stroke_width(width)))?;
        }
        let label = if strategies.len() > 1 {
            format!("{name} of {}", line.strategy)
        } else {
            name.to_owned()
        };
        entries.push((Swatch::Line(color, width), label));
    }
    Ok(())
}

/// Evictions, labelled, each with the time its pod was gone; dry-run
/// decisions.
fn draw_marks(
    chart: &mut Chart<'_, '_>,
    panel: &Panel,
    end: f64,
    entries: &mut Vec<(Swatch, String)>,
) -> DrawResult {
    let font = ("sans-serif", 12).into_font();
    for (i, mark) in panel.marks.iter().enumerate() {
        let raise = -20 - 15 * (i % 3) as i32;
        if let Some(gone) = mark.gone {
            chart.draw_series(DashedLineSeries::new(
                [mark.at, (gone.0, mark.at.1)],
                4,
                3,
                BLACK.stroke_width(1),
            ))?;
            chart.draw_series(std::iter::once(Circle::new(gone, 5, BLACK.stroke_width(2))))?;
        }
        let color = if mark.dry_run { DRY_RUN } else { BLACK };
        if mark.dry_run {
            chart.draw_series(std::iter::once(Circle::new(
                mark.at,
                7,
                color.stroke_width(2),
            )))?;
        } else {
            chart.draw_series(std::iter::once(Cross::new(
                mark.at,
                7,
                color.stroke_width(3),
            )))?;
        }
        // Late marks are labelled to their left, so the label stays on the chart.
        let width = (LABEL_CHAR_PX * mark.label.chars().count() as f64) as i32;
        let left = if mark.at.0 > end * 0.6 { -width - 4 } else { 4 };
        chart.draw_series(std::iter::once(
            EmptyElement::at(mark.at)
                + PathElement::new([(0, -8), (0, raise + 14)], color.mix(0.6))
                + Text::new(mark.label.clone(), (left, raise), font.color(&color)),
        ))?;
    }
    if panel.marks.iter().any(|m| !m.dry_run) {
        entries.push((Swatch::Cross, "eviction started".into()));
        if panel.marks.iter().any(|m| m.gone.is_some()) {
            entries.push((Swatch::Line(BLACK, 1), "terminating".into()));
            entries.push((Swatch::Circle(BLACK), "evicted pod gone".into()));
        }
    }
    if panel.marks.iter().any(|m| m.dry_run) {
        entries.push((Swatch::Circle(DRY_RUN), "would evict (dry run)".into()));
    }
    Ok(())
}

fn draw_legend(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    entries: &[(Swatch, String)],
) -> DrawResult {
    let font = ("sans-serif", 13).into_font();
    for (i, (swatch, label)) in entries.iter().enumerate() {
        let y = 48 + 20 * i as i32;
        match swatch {
            Swatch::Line(color, width) => {
                area.draw(&PathElement::new(
                    [(4, y), (24, y)],
                    color.stroke_width(*width),
                ))?;
            }
            Swatch::Fill(color) => {
                area.draw(&Rectangle::new([(4, y - 6), (24, y + 6)], color.filled()))?;
            }
            Swatch::Cross => area.draw(&Cross::new((14, y), 5, BLACK.stroke_width(3)))?,
            Swatch::Circle(color) => {
                area.draw(&Circle::new((14, y), 5, color.stroke_width(2)))?;
            }
        }
        area.draw(&Text::new(label.clone(), (32, y - 7), font.clone()))?;
    }
    Ok(())
}

/// Rows of a lane's labels, so that no two overlap: the row of each mark
/// (marks in time order) and how many rows each lane needs.
fn rows(lanes: &[Lane], marks: &[LaneMark], px_per_second: f64) -> (Vec<usize>, Vec<usize>) {
    let mut ends: Vec<Vec<f64>> = vec![Vec::new(); lanes.len()];
    let rows = marks
        .iter()
        .map(|mark| {
            let lane = &mut ends[lane_index(lanes, mark.lane)];
            let x = mark.at * px_per_second;
            let row = lane.iter().position(|end| *end < x).unwrap_or(lane.len());
            let width = 16.0 + LABEL_CHAR_PX * label(mark).chars().count() as f64;
            if row == lane.len() {
                lane.push(x + width);
            } else {
                lane[row] = x + width;
            }
            row
        })
        .collect();
    (rows, ends.iter().map(|lane| lane.len().max(1)).collect())
}

fn lane_index(lanes: &[Lane], lane: Lane) -> usize {
    lanes.iter().position(|l| *l == lane).unwrap_or(0)
}

/// The label drawn for `mark`, cut to [`LANE_LABEL`] characters.
fn label(mark: &LaneMark) -> String {
    let mut label: String = mark.label.chars().take(LANE_LABEL).collect();
    if label.len() < mark.label.len() {
        label.push('…');
    }
    label
}

/// Height of the lanes' chart for `rows` rows of labels in all.
fn lanes_height(rows: usize) -> u32 {
    90 + LANE_ROW_PX * rows as u32
}

/// One lane per kind of decision, each marked where it was first made.
fn draw_lanes(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    lanes: &[Lane],
    marks: &[LaneMark],
    (rows, lane_rows): (&[usize], &[usize]),
    end: f64,
) -> DrawResult {
    let total: usize = lane_rows.iter().sum();
    let mut chart = ChartBuilder::on(area)
        .caption("what else the policies decided", ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(34)
        .y_label_area_size(Y_LABELS_PX)
        .build_cartesian_2d(0.0..end, 0.0..total as f64)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .label_style(("sans-serif", 12))
        .disable_y_mesh()
        .y_labels(0)
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    // Lane k takes rows from the top down; row 0 of a lane is its first.
    let first_row: Vec<usize> = lane_rows
        .iter()
        .scan(0, |above, n| {
            let first = *above;
            *above += n;
            Some(first)
        })
        .collect();
    let y = |lane: usize, row: usize| total as f64 - (first_row[lane] + row) as f64 - 0.5;
    let font = ("sans-serif", 12).into_font();
    for (k, lane) in lanes.iter().enumerate() {
        let boundary = total as f64 - first_row[k] as f64;
        chart.draw_series(LineSeries::new(
            [(0.0, boundary), (end, boundary)],
            BLACK.mix(0.2),
        ))?;
        chart.draw_series(std::iter::once(
            EmptyElement::at((0.0, y(k, 0)))
                + Text::new(lane.title(), (8 - Y_LABELS_PX as i32, -7), font.clone()),
        ))?;
    }
    for (mark, row) in marks.iter().zip(rows) {
        let at = (mark.at, y(lane_index(lanes, mark.lane), *row));
        chart.draw_series(std::iter::once(
            EmptyElement::at(at)
                + TriangleMarker::new((0, 0), 5, BLACK.filled())
                + Text::new(label(mark), (8, -7), font.clone()),
        ))?;
    }
    Ok(())
}
