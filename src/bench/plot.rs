//! SVG charts of a run (plotters, SVG backend only, so they open in any browser or
//! viewer without plugins): latency CDFs of TTFT and E2E per target, and each target's
//! TTFT p50 with a p95 whisker.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::report::TargetReport;

/// Charts written by [`write_charts`].
pub const CHART_SIZE: (u32, u32) = (900, 520);

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
/// latency CDFs for the overhead mode. Returns the files written.
pub fn write_charts(
    dir: &Path,
    targets: &[TargetReport],
    overhead: bool,
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
    ttft_bars(&path, targets)?;
    written.push(path);
    Ok(written)
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
        let points =
            sorted.iter().enumerate().map(|(rank, value)| (*value, (rank + 1) as f64 / count));
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

fn ttft_bars(path: &Path, targets: &[TargetReport]) -> anyhow::Result<()> {
    let max_y = targets.iter().map(|t| t.summary.ttft.p95_ms).fold(0.0_f64, f64::max);
    let root = SVGBackend::new(path, CHART_SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let names: Vec<String> = targets.iter().map(|t| t.name.clone()).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption("TTFT per target: p50 bar, p95 whisker", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(90)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..targets.len().max(1) as f64, 0.0..(max_y * 1.1).max(1e-3))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(targets.len().max(1) * 2 + 1)
        .x_label_formatter(&|x| {
            let slot = x.floor() as usize;
            if (x - slot as f64 - 0.5).abs() < 1e-6 {
                names.get(slot).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("TTFT (ms)")
        .draw()?;
    for (slot, target) in targets.iter().enumerate() {
        let colour = PALETTE[slot % PALETTE.len()];
        let left = slot as f64 + 0.2;
        let right = slot as f64 + 0.8;
        let middle = slot as f64 + 0.5;
        chart.draw_series(std::iter::once(Rectangle::new(
            [(left, 0.0), (right, target.summary.ttft.p50_ms)],
            colour.filled(),
        )))?;
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(middle, target.summary.ttft.p50_ms), (middle, target.summary.ttft.p95_ms)],
            BLACK.stroke_width(2),
        )))?;
        chart.draw_series(std::iter::once(PathElement::new(
            vec![
                (middle - 0.1, target.summary.ttft.p95_ms),
                (middle + 0.1, target.summary.ttft.p95_ms),
            ],
            BLACK.stroke_width(2),
        )))?;
    }
    root.present()?;
    Ok(())
}
