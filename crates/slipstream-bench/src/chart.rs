//! SVG charts with plotters. The SVG backend writes text as `<text>` elements, so no system
//! fonts are needed to draw.

use std::path::Path;

use plotters::prelude::*;
use serde::{Deserialize, Serialize};

/// One line of a chart.
///
/// ```
/// use slipstream_bench::{Series, line_chart_svg};
/// let tps = Series {
///     name: "run a".into(),
///     x_label: "seconds".into(),
///     y_label: "transactions/s".into(),
///     points: vec![(1.0, 810.0), (2.0, 795.0), (3.0, 802.0)],
/// };
/// assert!(line_chart_svg("Throughput", &[tps])?.contains("run a"));
/// # Ok::<(), anyhow::Error>(())
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Series {
    /// Legend label.
    pub name: String,
    /// X axis label (with unit).
    pub x_label: String,
    /// Y axis label (with unit).
    pub y_label: String,
    /// (x, y) points.
    pub points: Vec<(f64, f64)>,
}

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

/// Draws every series as a line with markers on shared axes into an SVG file; the y axis
/// starts at 0 so ratios read true.
///
/// ```
/// use slipstream_bench::{Series, line_chart};
/// let s = Series {
///     name: "a".into(),
///     x_label: "seconds".into(),
///     y_label: "transactions/s".into(),
///     points: vec![(1.0, 810.0), (2.0, 795.0)],
/// };
/// let dir = tempfile::tempdir()?;
/// line_chart("Throughput", &[s], &dir.path().join("tps.svg"))?;
/// assert!(std::fs::read_to_string(dir.path().join("tps.svg"))?.starts_with("<svg"));
/// # Ok::<(), anyhow::Error>(())
/// ```
pub fn line_chart(title: &str, series: &[Series], path: &Path) -> anyhow::Result<()> {
    let svg = render(title, series, XScale::Linear)?;
    std::fs::write(path, svg)
        .map_err(|e| anyhow::anyhow!("could not write the chart {}: {e}", path.display()))
}

/// [`line_chart`] as an SVG string, for embedding in HTML.
///
/// ```
/// use slipstream_bench::{Series, line_chart_svg};
/// let s = Series {
///     name: "a".into(),
///     x_label: "users".into(),
///     y_label: "transactions/s".into(),
///     points: vec![(1.0, 400.0), (2.0, 780.0), (4.0, 1500.0)],
/// };
/// let svg = line_chart_svg("Scaling", &[s])?;
/// assert!(svg.starts_with("<svg") && svg.contains("Scaling"));
/// # Ok::<(), anyhow::Error>(())
/// ```
pub fn line_chart_svg(title: &str, series: &[Series]) -> anyhow::Result<String> {
    render(title, series, XScale::Linear)
}

/// A latency-percentile chart (x: percentile 0-100 on a "nines" scale, so 99%, 99.9% and
/// 99.99% are evenly spaced; y: latency) as an SVG string.
///
/// ```
/// use slipstream_bench::{Series, percentile_chart_svg};
/// let s = Series {
///     name: "new-order".into(),
///     x_label: "percentile".into(),
///     y_label: "ms".into(),
///     points: vec![(50.0, 1.2), (90.0, 2.0), (99.0, 4.5), (99.9, 11.0)],
/// };
/// assert!(percentile_chart_svg("Latency", &[s])?.contains("new-order"));
/// # Ok::<(), anyhow::Error>(())
/// ```
pub fn percentile_chart_svg(title: &str, series: &[Series]) -> anyhow::Result<String> {
    render(title, series, XScale::Nines)
}

/// The furthest "nine" drawn: 99.9999%.
const MAX_NINES: f64 = 6.0;

#[derive(Debug, Clone, Copy, PartialEq)]
enum XScale {
    Linear,
    /// x is a percentile p, drawn at -log10(1 - p/100).
    Nines,
}

fn nines(p: f64) -> f64 {
    (-(1.0 - p / 100.0).log10()).clamp(0.0, MAX_NINES)
}

fn render(title: &str, series: &[Series], scale: XScale) -> anyhow::Result<String> {
    anyhow::ensure!(!series.is_empty(), "nothing to chart");
    // Only points that can be drawn: a result file's numbers are input, and a NaN, an
    // infinity or a percentile outside 0-100 would make the axes' ranges meaningless (and
    // plotters' tick search loop for good on an infinite one).
    let drawable = |s: &Series| -> Vec<(f64, f64)> {
        s.points
            .iter()
            .filter(|p| scale == XScale::Linear || (0.0..=100.0).contains(&p.0))
            .map(|p| match scale {
                XScale::Nines => (nines(p.0), p.1),
                XScale::Linear => *p,
            })
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect()
    };
    let lines: Vec<Vec<(f64, f64)>> = series.iter().map(drawable).collect();
    let all = || lines.iter().flatten();
    let (x_min, x_max) = match all().next() {
        None => (
            0.0,
            if scale == XScale::Nines {
                MAX_NINES
            } else {
                1.0
            },
        ),
        Some(_) => all().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
            (lo.min(p.0), hi.max(p.0))
        }),
    };
    let y_max = all().map(|p| p.1).fold(0.0f64, f64::max);
    let x_span = if x_max > x_min {
        (x_min, x_max)
    } else {
        (x_min - 1.0, x_min + 1.0)
    };
    let y_top = if y_max > 0.0 { y_max * 1.1 } else { 1.0 };
    anyhow::ensure!(
        (x_span.1 - x_span.0).is_finite() && x_span.1 > x_span.0 && y_top.is_finite(),
        "cannot chart {title:?}: its values are too large to draw (x {x_min:e} to {x_max:e}, y up to {y_max:e})"
    );

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(x_span.0..x_span.1, 0.0..y_top)
            .map_err(draw_err)?;
        let percent = |x: &f64| {
            let p = 100.0 * (1.0 - 10f64.powf(-x));
            let digits = (x.floor() as usize).saturating_sub(1);
            format!("{p:.digits$}%")
        };
        let mut mesh = chart.configure_mesh();
        mesh.x_desc(series[0].x_label.as_str())
            .y_desc(series[0].y_label.as_str());
        if scale == XScale::Nines {
            mesh.x_label_formatter(&percent)
                .x_labels(MAX_NINES as usize + 1);
        }
        mesh.draw().map_err(draw_err)?;
        for (i, (s, points)) in series.iter().zip(&lines).enumerate() {
            let color = COLORS[i % COLORS.len()];
            chart
                .draw_series(LineSeries::new(
                    points.iter().copied(),
                    color.stroke_width(2),
                ))
                .map_err(draw_err)?
                .label(s.name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
            if points.len() <= MAX_MARKED_POINTS {
                chart
                    .draw_series(points.iter().map(|p| Circle::new(*p, 3, color.filled())))
                    .map_err(draw_err)?;
            }
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(match scale {
                // Latency rises to the right: the upper left is where the lines are not.
                XScale::Nines => SeriesLabelPosition::UpperLeft,
                XScale::Linear => SeriesLabelPosition::MiddleRight,
            })
            .draw()
            .map_err(draw_err)?;
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}

fn draw_err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("could not draw the chart: {e:?}")
}

/// Bins of a posterior density curve.
const DENSITY_BINS: usize = 60;

/// A vertical line on a posterior chart (an HDI bound, a ROPE edge); an empty label shares the
/// previous mark's legend entry and colour.
///
/// ```
/// use slipstream_bench::{Mark, posterior_chart_svg};
/// let draws = [0.9, 1.0, 1.05, 1.1, 1.0, 0.95];
/// let marks = [Mark::new("ROPE", 0.95), Mark::new("", 1.05)]; // one legend entry for both
/// let svg = posterior_chart_svg("B / A", "ratio", &[("ratio", &draws)], &marks)?;
/// assert!(svg.contains("ROPE"));
/// # Ok::<(), anyhow::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Mark {
    label: String,
    x: f64,
}

impl Mark {
    /// A line at `x`.
    ///
    /// ```
    /// let hdi = [slipstream_bench::Mark::new("95% HDI", 0.97), slipstream_bench::Mark::new("", 1.12)];
    /// # let _ = hdi;
    /// ```
    pub fn new(label: &str, x: f64) -> Mark {
        Mark {
            label: label.into(),
            x,
        }
    }
}

/// Densities of posterior draws (a histogram drawn as a line per series) with vertical marks,
/// as an SVG string: the article's figures of the two means and of their difference.
///
/// ```
/// use slipstream_bench::posterior_chart_svg;
/// let a = [10.1, 10.0, 9.9, 10.2, 10.0];
/// let b = [11.0, 11.2, 10.9, 11.1, 11.0];
/// let svg = posterior_chart_svg("Mean latency", "ms", &[("A", &a), ("B", &b)], &[])?;
/// assert!(svg.contains("Mean latency"));
/// assert!(posterior_chart_svg("Empty", "ms", &[("A", &[])], &[]).is_err()); // no draws
/// # Ok::<(), anyhow::Error>(())
/// ```
pub fn posterior_chart_svg(
    title: &str,
    x_label: &str,
    series: &[(&str, &[f64])],
    marks: &[Mark],
) -> anyhow::Result<String> {
    let finite = |v: &[f64]| {
        v.iter()
            .copied()
            .filter(|x| x.is_finite())
            .collect::<Vec<_>>()
    };
    let all: Vec<f64> = series.iter().flat_map(|(_, d)| finite(d)).collect();
    anyhow::ensure!(!all.is_empty(), "no draws to chart");
    let lo = all.iter().copied().fold(f64::MAX, f64::min);
    let hi = all.iter().copied().fold(f64::MIN, f64::max);
    let lo = marks.iter().map(|m| m.x).fold(lo, f64::min);
    let hi = marks.iter().map(|m| m.x).fold(hi, f64::max);
    let pad = ((hi - lo) * 0.05).max(f64::EPSILON);
    let (lo, hi) = (lo - pad, hi + pad);
    let width = (hi - lo) / DENSITY_BINS as f64;
    let curves: Vec<(String, Vec<(f64, f64)>)> = series
        .iter()
        .map(|(name, draws)| {
            let d = finite(draws);
            let mut bins = vec![0usize; DENSITY_BINS];
            for x in &d {
                let b = (((x - lo) / width) as usize).min(DENSITY_BINS - 1);
                bins[b] += 1;
            }
            let points = bins
                .iter()
                .enumerate()
                .map(|(i, &c)| {
                    (
                        lo + (i as f64 + 0.5) * width,
                        c as f64 / (d.len() as f64 * width),
                    )
                })
                .collect();
            (name.to_string(), points)
        })
        .collect();
    let y_top = curves
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.1))
        .fold(0.0f64, f64::max)
        * 1.1;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(lo..hi, 0.0..y_top.max(f64::EPSILON))
            .map_err(draw_err)?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc("posterior density")
            .draw()
            .map_err(draw_err)?;
        for (i, (name, points)) in curves.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            chart
                .draw_series(LineSeries::new(
                    points.iter().copied(),
                    color.stroke_width(2),
                ))
                .map_err(draw_err)?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
        }
        let mut color_index = curves.len();
        for m in marks {
            if !m.label.is_empty() {
                color_index += 1;
            }
            let color = COLORS[color_index % COLORS.len()];
            let line = chart
                .draw_series(LineSeries::new(
                    [(m.x, 0.0), (m.x, y_top)],
                    color.stroke_width(1),
                ))
                .map_err(draw_err)?;
            if !m.label.is_empty() {
                line.label(m.label.as_str()).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(1))
                });
            }
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(draw_err)?;
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(points: Vec<(f64, f64)>) -> Vec<Series> {
        vec![Series {
            name: "a".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            points,
        }]
    }

    /// A result file's numbers reach the charts: none may panic or hang them (found by
    /// session 33's attacker: percentiles above 100 panicked the label formatter, and an axis
    /// end that overflowed to infinity looped in plotters' tick search for good).
    #[test]
    fn hostile_points_are_left_out_or_refused_never_a_panic_or_a_hang() {
        let svg = percentile_chart_svg("p", &one(vec![(200.0, 1.0), (300.0, 2.0)]))
            .expect("no drawable point: empty axes");
        assert!(svg.contains("<svg"));
        let svg = percentile_chart_svg("p", &one(vec![(50.0, 1.0), (f64::NAN, 2.0), (99.0, 3.0)]))
            .expect("the NaN is left out");
        assert!(svg.contains("<svg"));
        let huge = [
            one(vec![(1.0, 1.7e308), (2.0, 1.7e308)]),
            one(vec![(-1.7e308, 1.0), (1.7e308, 2.0)]),
        ];
        for s in &huge {
            let e = line_chart_svg("t", s).expect_err("too large to draw");
            assert!(e.to_string().contains("too large"), "{e}");
        }
        let e = percentile_chart_svg("p", &one(vec![(50.0, 1e308), (99.0, 1.7e308)]))
            .expect_err("too large to draw");
        assert!(e.to_string().contains("too large"), "{e}");
        line_chart_svg(
            "t",
            &one(vec![(f64::INFINITY, 1.0), (1.0, 2.0), (2.0, 3.0)]),
        )
        .expect("the infinity is left out");
    }
}
