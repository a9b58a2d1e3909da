//! The HTML report of a replay: one self-contained file (inline CSS and SVG, no scripts,
//! nothing fetched from the network) with GPU allocation stacked by tier and by team,
//! queue length, pool sizes and spend over time, time-to-first-GPU CDFs per tier, and the
//! summary tables.

use super::metrics::{Metrics, Timeline};
use std::collections::BTreeMap;
use std::fmt::Write;

const WIDTH: f64 = 920.0;
const HEIGHT: f64 = 260.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 26.0;
const BOTTOM: f64 = 36.0;
const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

fn color(k: usize) -> &'static str {
    PALETTE.get(k % PALETTE.len()).copied().unwrap_or("#888")
}

fn esc(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn duration(s: f64) -> String {
    let s = s.max(0.0).round() as i64;
    match s {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s % 3600 == 0 && s < 86_400 => format!("{}h", s / 3600),
        s if s < 86_400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

fn when(t: i64, span: i64) -> String {
    if t >= 1_000_000_000 {
        let format = if span > 3 * 86_400 {
            "%m-%d"
        } else {
            "%m-%d %H:%M"
        };
        chrono::DateTime::from_timestamp(t, 0)
            .map_or_else(|| t.to_string(), |d| d.format(format).to_string())
    } else {
        duration(t as f64)
    }
}

/// A round step for about `ticks` ticks up to `max`.
fn nice_step(max: f64, ticks: f64) -> f64 {
    let raw = (max / ticks).max(1e-9);
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude)
}

fn number(v: f64) -> String {
    if v >= 1000.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

struct Frame {
    x0: f64,
    x1: f64,
    y_max: f64,
}

impl Frame {
    fn x(&self, v: f64) -> f64 {
        let span = (self.x1 - self.x0).max(1e-9);
        LEFT + (v - self.x0) / span * (WIDTH - LEFT - RIGHT)
    }
    fn y(&self, v: f64) -> f64 {
        HEIGHT - BOTTOM - v / self.y_max.max(1e-9) * (HEIGHT - TOP - BOTTOM)
    }
}

/// Axes, grid and legend around a chart body.
fn frame(
    out: &mut String,
    title: &str,
    f: &Frame,
    x_label: &dyn Fn(f64) -> String,
    x_ticks: &[f64],
    y_unit: &str,
    legend: &[(String, &str)],
) {
    let _ = write!(
        out,
        "<figure><figcaption>{}</figcaption><svg class=\"chart\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" aria-label=\"{}\">",
        esc(title),
        esc(title)
    );
    let step = nice_step(f.y_max, 4.0);
    let mut v = 0.0;
    while v <= f.y_max + 1e-9 {
        let y = f.y(v);
        let _ = write!(
            out,
            "<line class=\"grid\" x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/><text class=\"tick\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            WIDTH - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            esc(&number(v))
        );
        v += step;
    }
    let _ = write!(
        out,
        "<text class=\"unit\" x=\"{:.1}\" y=\"{:.1}\">{}</text>",
        4.0,
        12.0,
        esc(y_unit)
    );
    for &t in x_ticks {
        let x = f.x(t);
        let _ = write!(
            out,
            "<line class=\"axis\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/><text class=\"tick\" x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            HEIGHT - BOTTOM,
            HEIGHT - BOTTOM + 4.0,
            HEIGHT - BOTTOM + 18.0,
            esc(&x_label(t))
        );
    }
    let _ = write!(
        out,
        "<line class=\"axis\" x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/>",
        WIDTH - RIGHT,
        HEIGHT - BOTTOM,
        HEIGHT - BOTTOM
    );
    for (k, (name, color)) in legend.iter().enumerate() {
        let y = TOP + 14.0 * k as f64;
        let _ = write!(
            out,
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{color}\"/><text class=\"legend\" x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            WIDTH - RIGHT + 12.0,
            y,
            WIDTH - RIGHT + 26.0,
            y + 9.0,
            esc(name)
        );
    }
}

fn time_ticks(t: &Timeline, n: usize) -> (Frame, Vec<f64>) {
    let len = t.series.values().map(Vec::len).max().unwrap_or(0).max(1);
    let x0 = t.start as f64;
    let x1 = x0 + (len as i64 * t.bucket_s) as f64;
    let ticks = (0..=n)
        .map(|k| x0 + (x1 - x0) * k as f64 / n as f64)
        .collect();
    (Frame { x0, x1, y_max: 1.0 }, ticks)
}

/// Series of the timeline whose names start with `prefix`, by the rest of the name.
fn series<'t>(t: &'t Timeline, prefix: &str) -> Vec<(String, &'t [f64])> {
    t.series
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix(prefix)?.to_string(), v.as_slice())))
        .filter(|(_, v)| v.iter().any(|x| *x > 0.0))
        .collect()
}

/// Stacked areas (`stack`) or lines over time.
fn time_chart(
    out: &mut String,
    title: &str,
    t: &Timeline,
    parts: &[(String, &[f64])],
    unit: &str,
    stack: bool,
) {
    if parts.is_empty() {
        return;
    }
    let (mut f, ticks) = time_ticks(t, 6);
    let len = parts.iter().map(|(_, v)| v.len()).max().unwrap_or(0);
    let mut top = vec![0.0f64; len];
    let mut max: f64 = 0.0;
    for (_, v) in parts {
        for (i, x) in v.iter().enumerate() {
            if let Some(slot) = top.get_mut(i) {
                if stack {
                    *slot += x;
                    max = max.max(*slot);
                } else {
                    max = max.max(*x);
                }
            }
        }
    }
    f.y_max = (max * 1.05).max(1.0);
    let span = (f.x1 - f.x0) as i64;
    let legend: Vec<(String, &str)> = parts
        .iter()
        .enumerate()
        .map(|(k, (n, _))| (n.clone(), color(k)))
        .collect();
    frame(
        out,
        title,
        &f,
        &|x| when(x as i64, span),
        &ticks,
        unit,
        &legend,
    );
    let bucket = t.bucket_s as f64;
    let mut base = vec![0.0f64; len];
    for (k, (_, v)) in parts.iter().enumerate() {
        let color = color(k);
        // Step shape: each bucket is flat over its width.
        let mut upper = Vec::new();
        for (i, x) in v.iter().enumerate() {
            let b = base.get(i).copied().unwrap_or(0.0);
            let y = if stack { b + x } else { *x };
            let x0 = f.x0 + i as f64 * bucket;
            upper.push((f.x(x0), f.y(y)));
            upper.push((f.x(x0 + bucket), f.y(y)));
        }
        let points: String = upper
            .iter()
            .map(|(x, y)| format!("{x:.1},{y:.1} "))
            .collect();
        if stack {
            let lower: String = (0..v.len())
                .rev()
                .flat_map(|i| {
                    let b = base.get(i).copied().unwrap_or(0.0);
                    let x0 = f.x0 + i as f64 * bucket;
                    [(f.x(x0 + bucket), f.y(b)), (f.x(x0), f.y(b))]
                })
                .map(|(x, y)| format!("{x:.1},{y:.1} "))
                .collect();
            let _ = write!(
                out,
                "<polygon points=\"{points}{lower}\" fill=\"{color}\" fill-opacity=\"0.85\" stroke=\"none\"/>"
            );
            for (i, x) in v.iter().enumerate() {
                if let Some(b) = base.get_mut(i) {
                    *b += x;
                }
            }
        } else {
            let _ = write!(
                out,
                "<polyline points=\"{points}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"1.8\"/>"
            );
        }
    }
    out.push_str("</svg></figure>\n");
}

/// Empirical CDFs of time-to-first-GPU per tier, on a log time axis.
fn cdf_chart(out: &mut String, m: &Metrics) {
    let mut by_tier: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for o in &m.job_outcomes {
        if let Some(t) = o.time_to_first_gpu() {
            by_tier
                .entry(o.tier.clone().unwrap_or_else(|| "-".into()))
                .or_default()
                .push(t as f64);
        }
    }
    if by_tier.is_empty() {
        return;
    }
    let max = by_tier
        .values()
        .flat_map(|v| v.iter().copied())
        .fold(60.0f64, f64::max);
    let scale = |s: f64| (1.0 + s).log10();
    let f = Frame {
        x0: 0.0,
        x1: scale(max),
        y_max: 100.0,
    };
    let ticks: Vec<f64> = [0.0, 60.0, 600.0, 3600.0, 36_000.0, 86_400.0, 864_000.0]
        .into_iter()
        .filter(|s| *s <= max * 1.01)
        .map(scale)
        .collect();
    let legend: Vec<(String, &str)> = by_tier
        .keys()
        .enumerate()
        .map(|(k, n)| (n.clone(), color(k)))
        .collect();
    frame(
        out,
        "Time to first GPU, cumulative share of started jobs per tier",
        &f,
        &|x| duration(10f64.powf(x) - 1.0),
        &ticks,
        "% of jobs",
        &legend,
    );
    for (k, values) in by_tier.values_mut().enumerate() {
        values.sort_by(f64::total_cmp);
        let n = values.len() as f64;
        let mut points = format!("{:.1},{:.1} ", f.x(0.0), f.y(0.0));
        for (i, v) in values.iter().enumerate() {
            let x = f.x(scale(*v));
            points.push_str(&format!(
                "{x:.1},{:.1} {x:.1},{:.1} ",
                f.y(i as f64 / n * 100.0),
                f.y((i + 1) as f64 / n * 100.0)
            ));
        }
        points.push_str(&format!("{:.1},{:.1}", f.x(f.x1), f.y(100.0)));
        let _ = write!(
            out,
            "<polyline points=\"{points}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.8\"/>",
            color(k)
        );
    }
    out.push_str("</svg></figure>\n");
}

fn summary(out: &mut String, m: &Metrics) {
    let j = &m.jobs;
    let _ = writeln!(
        out,
        "<table class=\"kpi\"><tr><th>jobs</th><th>completed</th><th>running at end</th><th>waiting at end</th><th>denied</th><th>GPU utilization</th><th>GPU-hours</th><th>cost</th><th>preemptions</th><th>lost GPU-hours</th><th>decision cycles</th></tr>\
         <tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}%</td><td>{:.1}</td><td>${:.2}</td><td>{}</td><td>{:.2}</td><td>{}</td></tr></table>",
        j.submitted, j.completed, j.running_at_end, j.waiting_at_end, j.denied,
        m.utilization * 100.0, m.gpu_hours, m.cost, m.preemptions.count, m.preemptions.lost_gpu_hours, m.cycles
    );
    out.push_str("<h2>Waits per tier</h2><table><tr><th>tier</th><th>jobs</th><th>started</th><th>time to first GPU p50</th><th>p95</th><th>p99</th><th>queue wait p95</th><th>max</th></tr>");
    for (name, w) in std::iter::once(("(all)".to_string(), &m.all))
        .chain(m.tiers.iter().map(|(k, v)| (k.clone(), v)))
    {
        if w.submitted == 0 {
            continue;
        }
        let t = &w.time_to_first_gpu_s;
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&name), w.submitted, w.started, duration(t.p50), duration(t.p95), duration(t.p99),
            duration(w.queue_wait_s.p95), duration(w.queue_wait_s.max)
        );
    }
    out.push_str("</table>\n<h2>Teams</h2><table><tr><th>team</th><th>jobs</th><th>time to first GPU p95</th><th>GPU-hours</th><th>mean GPUs</th><th>peak GPUs</th><th>guaranteed</th><th>mean / guarantee</th><th>cost</th><th>preempted</th></tr>");
    for (name, t) in &m.teams {
        if t.waits.submitted == 0 && t.gpu_hours == 0.0 {
            continue;
        }
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.2}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td><td>${:.2}</td><td>{}</td></tr>",
            esc(name), t.waits.submitted, duration(t.waits.time_to_first_gpu_s.p95), t.gpu_hours, t.mean_gpus, t.peak_gpus,
            t.guaranteed_gpus, t.mean_of_guarantee.map_or("-".into(), |g| format!("{:.0}%", g * 100.0)), t.cost, t.preempted
        );
    }
    out.push_str("</table>\n<h2>Pools</h2><table><tr><th>pool</th><th>GPU-hours</th><th>available</th><th>utilization</th><th>node-hours</th><th>cost</th><th>nodes added</th><th>removed</th></tr>");
    for (name, p) in &m.pools {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}%</td><td>{:.1}</td><td>${:.2}</td><td>{}</td><td>{}</td></tr>",
            esc(name), p.gpu_hours, p.gpu_hours_available, p.utilization * 100.0, p.node_hours, p.cost, p.nodes_added, p.nodes_removed
        );
    }
    out.push_str("</table>\n");
}

/// The report as one HTML document.
/// Warm pools: target against idle nodes over time, and the warm starts.
fn warm(out: &mut String, m: &Metrics) {
    let t = &m.timeline;
    let lines = series(t, "warm.");
    if lines.is_empty() {
        return;
    }
    time_chart(
        out,
        "Warm pools: the plans' target and the nodes standing idle",
        t,
        &lines,
        "nodes",
        false,
    );
    out.push_str("<table><tr><th>pool</th><th>mean target</th><th>mean idle</th><th>idle node-hours</th><th>warm starts</th><th>their time to first GPU p50</th><th>p95</th></tr>");
    for (pool, w) in &m.warm {
        let p = &w.warm_time_to_first_gpu_s;
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{:.2}</td><td>{:.2}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(pool),
            w.mean_target_nodes,
            w.mean_idle_nodes,
            w.idle_node_hours,
            w.warm_starts,
            esc(&duration(p.p50)),
            esc(&duration(p.p95))
        );
    }
    out.push_str("</table>\n");
}

pub fn render(title: &str, m: &Metrics) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Gantry simulation: {}</title>\n<style>\
         body{{font:14px/1.4 system-ui,sans-serif;margin:24px auto;max-width:960px;color:#222}}\
         h1{{font-size:20px}}h2{{font-size:16px;margin-top:28px}}\
         table{{border-collapse:collapse;margin:8px 0}}td,th{{border:1px solid #ddd;padding:3px 8px;text-align:right}}\
         td:first-child,th:first-child{{text-align:left}}th{{background:#f4f4f4;font-weight:600}}\
         figure{{margin:18px 0}}figcaption{{font-weight:600;margin-bottom:4px}}\
         .chart{{width:100%;height:auto}}.grid{{stroke:#eee}}.axis{{stroke:#999}}\
         .tick,.legend,.unit{{font-size:11px;fill:#444}}.meta{{color:#666}}\
         </style></head><body>\n<h1>Gantry simulation: {}</h1>\n<p class=\"meta\">policy revision <code>{}</code> · {} → {} · {} decision cycles</p>\n",
        esc(title),
        esc(title),
        esc(&m.policy_revision),
        esc(&when(m.start, 0)),
        esc(&when(m.end, 0)),
        m.cycles
    );
    summary(&mut out, m);
    let t = &m.timeline;
    out.push_str("<h2>Over time</h2>\n");
    time_chart(
        &mut out,
        "GPUs allocated by tier",
        t,
        &series(t, "alloc.tier."),
        "GPUs",
        true,
    );
    time_chart(
        &mut out,
        "GPUs allocated by team",
        t,
        &series(t, "alloc.team."),
        "GPUs",
        true,
    );
    let mut queue: Vec<(String, &[f64])> = series(t, "queue")
        .into_iter()
        .map(|(_, v)| ("waiting".to_string(), v))
        .collect();
    queue.extend(
        series(t, "running")
            .into_iter()
            .map(|(_, v)| ("running".to_string(), v)),
    );
    time_chart(
        &mut out,
        "Jobs waiting and running",
        t,
        &queue,
        "jobs",
        false,
    );
    time_chart(
        &mut out,
        "Nodes per pool (paid for, booting included)",
        t,
        &series(t, "nodes.pool."),
        "nodes",
        true,
    );
    warm(&mut out, m);
    time_chart(
        &mut out,
        "Spend per pool",
        t,
        &series(t, "spend.pool."),
        "$/h",
        true,
    );
    out.push_str("<h2>Waits</h2>\n");
    cdf_chart(&mut out, m);
    if !m.scale_events.is_empty() {
        out.push_str("<h2>Scale events</h2><table><tr><th>at</th><th>pool</th><th>nodes</th><th>reason</th></tr>");
        for e in m.scale_events.iter().take(200) {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{:+}</td><td style=\"text-align:left\">{}</td></tr>",
                esc(&when(e.at, 0)),
                esc(&e.pool),
                e.delta_nodes,
                esc(&e.reason)
            );
        }
        out.push_str("</table>\n");
        if m.scale_events.len() > 200 {
            let _ = write!(
                out,
                "<p>… and {} more in the JSON.</p>",
                m.scale_events.len() - 200
            );
        }
    }
    out.push_str("</body></html>\n");
    out
}
