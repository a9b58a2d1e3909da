//! The HTML report (placeholder until charts land).

use super::metrics::Metrics;

pub fn render(title: &str, m: &Metrics) -> String {
    format!(
        "<!doctype html><title>{title}</title><pre>{}</pre>",
        m.cycles
    )
}
