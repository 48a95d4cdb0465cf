//! SVG charts with plotters. The SVG backend writes text as `<text>` elements, so no system
//! fonts are needed to draw.

use std::path::Path;

use plotters::prelude::*;

use crate::Series;

const WIDTH: u32 = 720;
const HEIGHT: u32 = 400;
/// Above this many points per series, markers hide the line: draw the line alone.
const MAX_MARKED_POINTS: usize = 60;
const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// Draws every series as a line with markers on shared axes; the y axis starts at 0 so ratios
/// read true.
pub fn line_chart(title: &str, series: &[Series], path: &Path) -> anyhow::Result<()> {
    anyhow::ensure!(!series.is_empty(), "nothing to chart");
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let (x_min, x_max) = xs.fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(x), hi.max(x)));
    let y_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max);
    let x_span = if x_max > x_min {
        (x_min, x_max)
    } else {
        (x_min - 1.0, x_min + 1.0)
    };
    let y_top = if y_max > 0.0 { y_max * 1.1 } else { 1.0 };

    let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(x_span.0..x_span.1, 0.0..y_top)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc(series[0].x_label.as_str())
        .y_desc(series[0].y_label.as_str())
        .draw()
        .map_err(draw_err)?;
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(draw_err)?
            .label(s.name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
        if s.points.len() <= MAX_MARKED_POINTS {
            chart
                .draw_series(s.points.iter().map(|p| Circle::new(*p, 3, color.filled())))
                .map_err(draw_err)?;
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(draw_err)?;
    root.present().map_err(draw_err)?;
    Ok(())
}

fn draw_err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("could not draw the chart: {e:?}")
}
