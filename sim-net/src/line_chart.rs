//! One SVG line chart, one line per series with a legend: the sweep draws
//! each figure against a key with it, and `twin --svg` the deadline
//! satisfaction over time of its live and simulated runs.

use std::ops::Range;
use std::path::Path;

use plotters::coord::CoordTranslate;
use plotters::prelude::*;

/// Drawing failed; the cause as plotters gives it.
pub(crate) type DrawResult = Result<(), Box<dyn std::error::Error>>;

const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Draws `chart`'s legend, top right, as every chart of the simulator has it.
pub(crate) fn legend<'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, CT>,
) -> DrawResult {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// What a chart shows, besides its lines.
pub(crate) struct Frame<'a> {
    /// The title.
    pub(crate) caption: &'a str,
    /// The x axis's label.
    pub(crate) x_desc: &'a str,
    /// The y axis's label.
    pub(crate) y_desc: &'a str,
    /// The x axis's span; drawn logarithmic when it starts above 0 and
    /// covers a factor of 8 or more.
    pub(crate) x: (f64, f64),
    /// The y axis's span.
    pub(crate) y: Range<f64>,
    /// Mark each point with a dot (a few points per line), or draw the
    /// line alone (many).
    pub(crate) dots: bool,
}

/// One line: its legend and its points, in x order.
pub(crate) struct Line<'a> {
    /// The legend.
    pub(crate) label: &'a str,
    /// The points.
    pub(crate) points: Vec<(f64, f64)>,
}

/// Draws `lines` in `frame` into the SVG file `path`.
pub(crate) fn draw(path: &Path, frame: &Frame<'_>, lines: &[Line<'_>]) -> DrawResult {
    let (x0, x1) = frame.x;
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(frame.caption, ("sans-serif", 18))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60);
    let y_range = frame.y.clone();
    macro_rules! plot {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(frame.x_desc)
                .y_desc(frame.y_desc)
                .draw()?;
            for (i, line) in lines.iter().enumerate() {
                let color = COLORS[i % COLORS.len()];
                chart
                    .draw_series(LineSeries::new(
                        line.points.iter().copied(),
                        color.stroke_width(2),
                    ))?
                    .label(line.label)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                    });
                if frame.dots {
                    chart.draw_series(
                        line.points
                            .iter()
                            .map(move |&(x, y)| Circle::new((x, y), 3, color.filled())),
                    )?;
                }
            }
            legend(&mut chart)?;
        }};
    }
    if x0 > 0.0 && x1 / x0 >= 8.0 {
        plot!(builder.build_cartesian_2d((x0..x1).log_scale(), y_range)?);
    } else {
        let span = (x1 - x0).max(1e-9);
        plot!(builder.build_cartesian_2d((x0 - span * 0.02)..(x1 + span * 0.02), y_range)?);
    }
    root.present()?;
    Ok(())
}
