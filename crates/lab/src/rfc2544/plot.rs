//! Plots as SVG, written by hand (a few line charts need no plotting library), and
//! rendered to PNG with resvg: throughput against frame size per DUT, frame loss
//! against offered load, latency percentiles per frame size.

use std::fmt::Write;

use super::Results;

pub struct Series {
    pub name: String,
    pub color: &'static str,
    /// SVG stroke-dasharray ("" for solid).
    pub dash: &'static str,
    pub points: Vec<(f64, f64)>,
}

pub struct Chart {
    pub title: String,
    pub x_title: String,
    pub y_title: String,
    /// Categorical x axis: labels at x = 0, 1, ...
    pub x_labels: Option<Vec<String>>,
    pub log_y: bool,
    pub series: Vec<Series>,
}

const W: f64 = 820.0;
const H: f64 = 480.0;
const L: f64 = 80.0;
const R: f64 = 200.0;
const T: f64 = 44.0;
const B: f64 = 60.0;

pub fn color(dut: &str) -> &'static str {
    match dut {
        "espgw" => "#1f77b4",
        "strongswan" => "#d62728",
        "kernel" => "#2ca02c",
        "ceiling" => "#7f7f7f",
        "standin" => "#9467bd",
        _ => "#ff7f0e",
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if a >= 1e3 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Linear ticks: 1, 2 or 5 times a power of ten, about 5 of them.
fn nice_ticks(max: f64) -> Vec<f64> {
    let max = if max > 0.0 { max } else { 1.0 };
    let raw = max / 5.0;
    let p = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * p);
    let n = (max / step).ceil() as usize;
    (0..=n).map(|i| i as f64 * step).collect()
}

/// Where a chart's data lands: the x range, the y ticks and the plot area's mapping.
struct Frame {
    x0: f64,
    x1: f64,
    y_ticks: Vec<f64>,
    ylo: f64,
    yhi: f64,
    log_y: bool,
}

const PW: f64 = W - L - R;
const PH: f64 = H - T - B;

impl Frame {
    fn sx(&self, x: f64) -> f64 {
        L + (x - self.x0) / (self.x1 - self.x0) * PW
    }

    fn sy(&self, y: f64) -> f64 {
        let f = if self.log_y {
            (y.max(self.ylo).log10() - self.ylo.log10()) / (self.yhi.log10() - self.ylo.log10())
        } else {
            (y - self.ylo) / (self.yhi - self.ylo)
        };
        T + PH - f * PH
    }
}

/// Log-scale ticks over `ys`: decades, with 2 and 5 between them when there are few.
fn log_ticks(ys: &[f64], ymax: f64) -> Vec<f64> {
    let ymin = ys.iter().cloned().fold(f64::INFINITY, f64::min);
    let (lo, hi) = if ymin.is_finite() {
        (ymin.log10().floor() as i32, ymax.log10().ceil() as i32)
    } else {
        (0, 1)
    };
    let hi = hi.max(lo + 1);
    let subs: &[f64] = if hi - lo <= 2 {
        &[1.0, 2.0, 5.0]
    } else {
        &[1.0]
    };
    let mut v: Vec<f64> = (lo..hi)
        .flat_map(|e| subs.iter().map(move |m| m * 10f64.powi(e)))
        .collect();
    v.push(10f64.powi(hi));
    v
}

impl Chart {
    pub fn render(&self) -> String {
        let f = self.frame();
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="DejaVu Sans, sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="24" font-size="16" text-anchor="middle">{}</text>"#,
            L + PW / 2.0,
            esc(&self.title)
        );
        self.y_grid(&f, &mut s);
        self.x_grid(&f, &mut s);
        self.axis_titles(&mut s);
        for (i, se) in self.series.iter().enumerate() {
            self.series_svg(&f, i, se, &mut s);
        }
        s.push_str("</svg>\n");
        s
    }

    /// The x range and y ticks the data needs.
    fn frame(&self) -> Frame {
        let pts = self.series.iter().flat_map(|s| s.points.iter());
        let ys: Vec<f64> = pts
            .clone()
            .map(|p| p.1)
            .filter(|y| y.is_finite() && (!self.log_y || *y > 0.0))
            .collect();
        let xs: Vec<f64> = pts.map(|p| p.0).filter(|x| x.is_finite()).collect();
        let (x0, x1) = match &self.x_labels {
            Some(l) => (-0.5, l.len().max(1) as f64 - 0.5),
            None => {
                let lo = xs.iter().cloned().fold(f64::INFINITY, f64::min);
                let hi = xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                if lo.is_finite() && hi > lo {
                    (lo.min(0.0), hi)
                } else {
                    (0.0, 1.0)
                }
            }
        };
        let ymax = ys.iter().cloned().fold(0.0, f64::max);
        let y_ticks = if self.log_y {
            log_ticks(&ys, ymax)
        } else {
            nice_ticks(ymax * 1.05)
        };
        let (ylo, yhi) = (y_ticks[0], *y_ticks.last().unwrap_or(&1.0));
        Frame {
            x0,
            x1,
            y_ticks,
            ylo,
            yhi,
            log_y: self.log_y,
        }
    }

    fn y_grid(&self, f: &Frame, s: &mut String) {
        for &t in &f.y_ticks {
            let y = f.sy(t);
            let _ = writeln!(
                s,
                "<line x1=\"{L}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#e4e4e4\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                L + PW,
                L - 6.0,
                y + 4.0,
                fmt_num(t)
            );
        }
    }

    fn x_grid(&self, f: &Frame, s: &mut String) {
        match &self.x_labels {
            Some(labels) => {
                for (i, l) in labels.iter().enumerate() {
                    let x = f.sx(i as f64);
                    let _ = writeln!(
                        s,
                        r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                        T + PH + 18.0,
                        esc(l)
                    );
                }
            }
            None => {
                for t in nice_ticks(f.x1) {
                    if t < f.x0 || t > f.x1 * 1.0001 {
                        continue;
                    }
                    let x = f.sx(t);
                    let _ = writeln!(
                        s,
                        "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{T}\" y2=\"{:.1}\" stroke=\"#e4e4e4\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                        T + PH,
                        T + PH + 18.0,
                        fmt_num(t)
                    );
                }
            }
        }
    }

    fn axis_titles(&self, s: &mut String) {
        let _ = writeln!(
            s,
            r##"<rect x="{L}" y="{T}" width="{PW}" height="{PH}" fill="none" stroke="#444"/>"##
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            L + PW / 2.0,
            H - 14.0,
            esc(&self.x_title)
        );
        let _ = writeln!(
            s,
            r#"<text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
            T + PH / 2.0,
            esc(&self.y_title)
        );
    }

    /// One series' line and points, and its legend entry (the `i`th).
    fn series_svg(&self, f: &Frame, i: usize, se: &Series, s: &mut String) {
        let pts: Vec<String> = se
            .points
            .iter()
            .filter(|p| p.0.is_finite() && p.1.is_finite() && (!self.log_y || p.1 > 0.0))
            .map(|&(x, y)| format!("{:.1},{:.1}", f.sx(x), f.sy(y)))
            .collect();
        if !pts.is_empty() {
            let _ = writeln!(
                s,
                r#"<polyline fill="none" stroke="{}" stroke-width="2" stroke-dasharray="{}" points="{}"/>"#,
                se.color,
                se.dash,
                pts.join(" ")
            );
            for p in &pts {
                let (x, y) = p.split_once(',').unwrap_or(("0", "0"));
                let _ = writeln!(
                    s,
                    r#"<circle cx="{x}" cy="{y}" r="3" fill="{}"/>"#,
                    se.color
                );
            }
        }
        let ly = T + 10.0 + i as f64 * 18.0;
        let lx = L + PW + 14.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" x2="{}" y1="{ly}" y2="{ly}" stroke="{}" stroke-width="2" stroke-dasharray="{}"/><text x="{}" y="{}">{}</text>"#,
            lx + 24.0,
            se.color,
            se.dash,
            lx + 30.0,
            ly + 4.0,
            esc(&se.name)
        );
    }
}

fn sizes_and_duts(r: &Results) -> (Vec<String>, Vec<String>) {
    let mut sizes: Vec<String> = Vec::new();
    let mut duts: Vec<String> = Vec::new();
    for x in &r.summaries {
        if !sizes.contains(&x.frame_size) {
            sizes.push(x.frame_size.clone());
        }
        if !duts.contains(&x.dut) {
            duts.push(x.dut.clone());
        }
    }
    (sizes, duts)
}

/// The three figures of the published comparison, as (name, SVG).
pub fn all(r: &Results) -> Vec<(String, String)> {
    let (sizes, duts) = sizes_and_duts(r);
    let idx = |f: &str| sizes.iter().position(|s| s == f).unwrap_or(0) as f64;
    let tput = Chart {
        title: "Zero-loss throughput by frame size".into(),
        x_title: "frame size (bytes, FCS included)".into(),
        y_title: "frames per second".into(),
        x_labels: Some(sizes.clone()),
        log_y: true,
        series: duts
            .iter()
            .map(|d| Series {
                name: d.clone(),
                color: color(d),
                dash: if d == "ceiling" { "6 4" } else { "" },
                points: r
                    .summaries
                    .iter()
                    .filter(|x| &x.dut == d)
                    .map(|x| (idx(&x.frame_size), x.throughput_pps))
                    .collect(),
            })
            .collect(),
    };
    let dashes = ["", "6 4", "2 3", "10 3 2 3"];
    let mut loss_series = Vec::new();
    for d in &duts {
        for (i, f) in sizes.iter().enumerate() {
            if let Some(x) = r
                .summaries
                .iter()
                .find(|x| &x.dut == d && &x.frame_size == f && !x.loss_curve.is_empty())
            {
                let mut pts = x.loss_curve.clone();
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                loss_series.push(Series {
                    name: format!("{d} {f}"),
                    color: color(d),
                    dash: dashes[i % dashes.len()],
                    points: pts,
                });
            }
        }
    }
    let loss = Chart {
        title: "Frame loss against offered load".into(),
        x_title: "offered load (% of the tester's maximum rate)".into(),
        y_title: "frame loss (%)".into(),
        x_labels: None,
        log_y: false,
        series: loss_series,
    };
    let mut lat_series = Vec::new();
    for d in &duts {
        for (name, dash, pick) in [("p50", "", 0usize), ("p99", "6 4", 1), ("p99.9", "2 3", 2)] {
            let points: Vec<(f64, f64)> = r
                .summaries
                .iter()
                .filter(|x| &x.dut == d)
                .filter_map(|x| {
                    x.latency.as_ref().map(|l| {
                        let v = [l.p50_ns, l.p99_ns, l.p999_ns][pick];
                        (idx(&x.frame_size), v as f64 / 1000.0)
                    })
                })
                .collect();
            if !points.is_empty() {
                lat_series.push(Series {
                    name: format!("{d} {name}"),
                    color: color(d),
                    dash,
                    points,
                });
            }
        }
    }
    let lat = Chart {
        title: "Latency at the throughput rate".into(),
        x_title: "frame size (bytes, FCS included)".into(),
        y_title: "latency (µs)".into(),
        x_labels: Some(sizes),
        log_y: true,
        series: lat_series,
    };
    vec![
        ("throughput".into(), tput.render()),
        ("loss".into(), loss.render()),
        ("latency".into(), lat.render()),
    ]
}

/// DejaVu Sans (Bitstream Vera licence, `assets/fonts/LICENSE-DejaVu.txt`), compiled in so
/// that a plot has its text on a machine with no fonts installed: the PNG looks the same
/// everywhere, and no system font is ever read.
const EMBEDDED_FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");
const EMBEDDED_FAMILY: &str = "DejaVu Sans";

/// The font database plots are drawn with: the embedded font alone, standing in for every
/// generic family the SVG may name.
fn font_db() -> resvg::usvg::fontdb::Database {
    let mut db = resvg::usvg::fontdb::Database::new();
    db.load_font_data(EMBEDDED_FONT.to_vec());
    db.set_sans_serif_family(EMBEDDED_FAMILY);
    db.set_serif_family(EMBEDDED_FAMILY);
    db.set_monospace_family(EMBEDDED_FAMILY);
    db
}

/// Draws an SVG with the fonts of `db`.
fn rasterize(
    svg: &str,
    db: resvg::usvg::fontdb::Database,
) -> Result<resvg::tiny_skia::Pixmap, String> {
    use resvg::{tiny_skia, usvg};
    let mut opt = usvg::Options {
        font_family: EMBEDDED_FAMILY.into(),
        ..usvg::Options::default()
    };
    *opt.fontdb_mut() = db;
    let tree = usvg::Tree::from_str(svg, &opt).map_err(|e| format!("plot: {e}"))?;
    let size = tree.size().to_int_size();
    let mut pixmap =
        tiny_skia::Pixmap::new(size.width(), size.height()).ok_or("plot: empty image")?;
    resvg::render(&tree, tiny_skia::Transform::default(), &mut pixmap.as_mut());
    Ok(pixmap)
}

/// Renders an SVG to PNG with the embedded font.
pub fn png(svg: &str) -> Result<Vec<u8>, String> {
    rasterize(svg, font_db())?
        .encode_png()
        .map_err(|e| format!("plot: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round() {
        assert_eq!(nice_ticks(100.0), vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]);
        assert_eq!(nice_ticks(7.0).last().copied(), Some(8.0));
        assert_eq!(fmt_num(150_000.0), "150k");
        assert_eq!(fmt_num(2_500_000.0), "2.5M");
    }

    /// Dark pixels in the band of the chart's title (above the plot area, where only the
    /// title is drawn).
    fn title_ink(pixmap: &resvg::tiny_skia::Pixmap) -> usize {
        let w = pixmap.width() as usize;
        pixmap
            .pixels()
            .chunks(w)
            .take(T as usize - 8)
            .flat_map(|row| row.iter())
            .filter(|p| p.demultiply().red() < 128)
            .count()
    }

    /// A chart of one espgw series.
    fn one_series(title: &str, x_labels: Option<Vec<String>>, points: Vec<(f64, f64)>) -> Chart {
        Chart {
            title: title.into(),
            x_title: "x".into(),
            y_title: "y".into(),
            log_y: x_labels.is_some(),
            x_labels,
            series: vec![Series {
                name: "espgw".into(),
                color: color("espgw"),
                dash: "",
                points,
            }],
        }
    }

    #[test]
    fn plot_text_comes_from_the_embedded_font() {
        let svg = one_series("throughput", None, vec![(0.0, 1.0), (1.0, 2.0)]).render();
        // The embedded font alone (no system font is loaded): the title is drawn.
        let with_font = rasterize(&svg, font_db()).unwrap();
        let ink = title_ink(&with_font);
        assert!(ink > 100, "title drawn with {ink} dark pixels");
        // With an empty font database the same band stays white: what was counted above
        // is the title's text, not a line of the chart.
        let without = rasterize(&svg, resvg::usvg::fontdb::Database::new()).unwrap();
        assert_eq!(title_ink(&without), 0);
    }

    #[test]
    fn a_chart_renders_to_svg_and_png() {
        let c = one_series(
            "t <1>",
            Some(vec!["64".into(), "1518".into()]),
            vec![(0.0, 100_000.0), (1.0, 50_000.0)],
        );
        let svg = c.render();
        assert!(svg.contains("<polyline"));
        assert!(svg.contains("t &lt;1&gt;"));
        let png = png(&svg).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        // Width and height from the IHDR chunk.
        assert_eq!(
            u32::from_be_bytes([png[16], png[17], png[18], png[19]]),
            820
        );
        assert_eq!(
            u32::from_be_bytes([png[20], png[21], png[22], png[23]]),
            480
        );
    }
}
