//! SVG charts of a run (plotters, SVG backend only, so they open in any browser or
//! viewer without plugins): latency CDFs of TTFT and E2E per target, each target's TTFT p50
//! with a p95 whisker, and with `--goodput` each target's goodput share with its rounds'
//! range.

use std::collections::BTreeMap;

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::report::TargetReport;
use super::stats::Slo;

/// Charts written by [`write_charts`].
pub const CHART_SIZE: (u32, u32) = (900, 520);

/// Points drawn per CDF line at most.
const MAX_POINTS_PER_LINE: usize = 2000;

/// Distinguishable line colours, repeated when there are more targets.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Writes the charts into `dir` (created if missing); `overhead` selects microsecond
/// latency CDFs for the overhead mode; a set `slo` adds the goodput chart. Returns the
/// files written.
pub fn write_charts(
    dir: &Path,
    targets: &[TargetReport],
    overhead: bool,
    slo: &Slo,
) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    let successes = |target: &TargetReport| {
        target
            .records
            .iter()
            .filter(|record| record.outcome.is_success())
            .cloned()
            .collect::<Vec<_>>()
    };
    if overhead {
        let series: Vec<(String, Vec<f64>)> = targets
            .iter()
            .map(|t| {
                (t.name.clone(), successes(t).iter().map(|r| r.e2e.as_secs_f64() * 1e6).collect())
            })
            .collect();
        let path = dir.join("latency_cdf.svg");
        cdf_chart(&path, "Tiny-request latency CDF", "latency (us)", &series)?;
        written.push(path);
        return Ok(written);
    }
    let ttft: Vec<(String, Vec<f64>)> = targets
        .iter()
        .map(|t| {
            let values =
                successes(t).iter().filter_map(|r| r.ttft).map(|d| d.as_secs_f64() * 1e3).collect();
            (t.name.clone(), values)
        })
        .collect();
    let e2e: Vec<(String, Vec<f64>)> = targets
        .iter()
        .map(|t| (t.name.clone(), successes(t).iter().map(|r| r.e2e.as_secs_f64()).collect()))
        .collect();
    let path = dir.join("ttft_cdf.svg");
    cdf_chart(&path, "TTFT CDF", "TTFT (ms)", &ttft)?;
    written.push(path);
    let path = dir.join("e2e_cdf.svg");
    cdf_chart(&path, "End-to-end latency CDF", "E2E latency (s)", &e2e)?;
    written.push(path);
    let path = dir.join("ttft_by_target.svg");
    let ttft_rows: Vec<Bar> = targets
        .iter()
        .map(|t| Bar {
            name: t.name.clone(),
            value: t.summary.ttft.p50_ms,
            whisker: (t.summary.ttft.p50_ms, t.summary.ttft.p95_ms),
        })
        .collect();
    bars(&path, "TTFT per target: p50 bar, p95 whisker", "TTFT (ms)", &ttft_rows)?;
    written.push(path);
    if slo.is_set() {
        let path = dir.join("goodput_by_target.svg");
        let rows: Vec<Bar> = targets.iter().map(|t| goodput_bar(t, slo)).collect();
        let caption = "Goodput share per target: all rounds, whisker from worst to best round";
        bars(&path, caption, "share of requests meeting every SLO", &rows)?;
        written.push(path);
    }
    Ok(written)
}

/// One horizontal bar and its whisker.
struct Bar {
    name: String,
    value: f64,
    whisker: (f64, f64),
}

/// The share of a target's requests that met `slo`, and the lowest and highest share of a
/// round.
fn goodput_bar(target: &TargetReport, slo: &Slo) -> Bar {
    let mut rounds: BTreeMap<u32, (usize, usize)> = BTreeMap::new();
    for record in &target.records {
        let (met, all) = rounds.entry(record.round).or_default();
        *met += usize::from(slo.is_met_by(record));
        *all += 1;
    }
    let share = |(met, all): (usize, usize)| met as f64 / all.max(1) as f64;
    let total = rounds.values().fold((0, 0), |(m, a), &(met, all)| (m + met, a + all));
    let per_round = rounds.values().map(|&round| share(round));
    let low = per_round.clone().fold(f64::INFINITY, f64::min);
    let high = per_round.fold(f64::NEG_INFINITY, f64::max);
    let value = share(total);
    let whisker = if rounds.is_empty() { (value, value) } else { (low, high) };
    Bar { name: target.name.clone(), value, whisker }
}

fn cdf_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    series: &[(String, Vec<f64>)],
) -> anyhow::Result<()> {
    let max_x =
        series.iter().flat_map(|(_, values)| values.iter().copied()).fold(0.0_f64, f64::max);
    let root = SVGBackend::new(path, CHART_SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..(max_x * 1.05).max(1e-3), 0.0..1.0_f64)?;
    chart.configure_mesh().x_desc(x_label).y_desc("fraction of requests").draw()?;
    for (position, (name, values)) in series.iter().enumerate() {
        let mut sorted = values.clone();
        sorted.sort_by(f64::total_cmp);
        let count = sorted.len().max(1) as f64;
        let colour = PALETTE[position % PALETTE.len()];
        // At most ~2,000 points a line (and always the last), so that charts of runs with
        // hundreds of thousands of requests stay small files.
        let step = sorted.len().div_ceil(MAX_POINTS_PER_LINE).max(1);
        let last = sorted.len().saturating_sub(1);
        let points = sorted
            .iter()
            .enumerate()
            .filter(|(rank, _)| rank % step == 0 || *rank == last)
            .map(|(rank, value)| (*value, (rank + 1) as f64 / count));
        chart
            .draw_series(LineSeries::new(points, colour.stroke_width(2)))?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Horizontal bars, one row per target, so that long target names stay readable.
/// Horizontal bars, one per row in order from the top, each with a whisker.
fn bars(path: &Path, caption: &str, x_desc: &str, rows: &[Bar]) -> anyhow::Result<()> {
    let max_x = rows.iter().map(|row| row.whisker.1.max(row.value)).fold(0.0_f64, f64::max);
    let count = rows.len().max(1);
    let height = (120 + 42 * count as u32).max(CHART_SIZE.1 / 2);
    let root = SVGBackend::new(path, (CHART_SIZE.0, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let names: Vec<String> = rows.iter().map(|row| row.name.clone()).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(170)
        .build_cartesian_2d(0.0..(max_x * 1.1).max(1e-3), 0.0..count as f64)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(count * 2 + 1)
        .y_label_formatter(&|y| {
            // Rows are drawn top-down in the order given; labels sit at row centres.
            let from_top = count as f64 - y;
            let slot = from_top.floor() as usize;
            if (from_top - slot as f64 - 0.5).abs() < 1e-6 {
                names.get(slot).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_desc(x_desc)
        .draw()?;
    for (slot, row) in rows.iter().enumerate() {
        let colour = PALETTE[slot % PALETTE.len()];
        let top = (count - slot) as f64 - 0.2;
        let bottom = (count - slot - 1) as f64 + 0.2;
        let middle = (count - slot) as f64 - 0.5;
        let (low, high) = row.whisker;
        chart.draw_series(std::iter::once(Rectangle::new(
            [(0.0, bottom), (row.value, top)],
            colour.filled(),
        )))?;
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(low, middle), (high, middle)],
            BLACK.stroke_width(2),
        )))?;
        for end in [low, high] {
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(end, middle - 0.12), (end, middle + 0.12)],
                BLACK.stroke_width(2),
            )))?;
        }
    }
    root.present()?;
    Ok(())
}
