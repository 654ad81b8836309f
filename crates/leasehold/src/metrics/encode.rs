//! Writing a registry out for a scrape, in OpenMetrics or the older Prometheus text format.

use super::Registry;

/// The content type of [`encode`]'s output, for an HTTP response to a scrape.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The content type of [`encode_text`]'s output.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Writes every metric of `registry` in the OpenMetrics text format, which Prometheus asks
/// for first.
pub fn encode(registry: &Registry) -> String {
    let mut text = String::new();
    // Writing to a String cannot fail, and the metrics' own encoders only fail on a
    // failing writer.
    let _ = prometheus_client::encoding::text::encode(&mut text, registry);
    text
}

/// Writes every metric of `registry` in the older Prometheus text format (0.0.4), for
/// scrapers and tools that do not read OpenMetrics (`promtool check metrics`, some agents).
///
/// The two differ only in what this converts: OpenMetrics names a counter family without
/// its `_total` suffix in `# HELP` and `# TYPE`, has `# UNIT` lines, and ends with `# EOF`.
///
/// ```
/// use leasehold::metrics::{encode_text, Registry};
/// use prometheus_client::metrics::counter::Counter;
/// let mut registry = Registry::default();
/// let counter: Counter = Counter::default();
/// registry.register("jobs", "Jobs done", counter.clone());
/// counter.inc();
/// assert_eq!(
///     encode_text(&registry),
///     "# HELP jobs_total Jobs done.\n# TYPE jobs_total counter\njobs_total 1\n"
/// );
/// ```
pub fn encode_text(registry: &Registry) -> String {
    openmetrics_to_text(&encode(registry))
}

fn openmetrics_to_text(openmetrics: &str) -> String {
    let mut counters = std::collections::HashSet::new();
    for line in openmetrics.lines() {
        if let Some(name) = line
            .strip_prefix("# TYPE ")
            .and_then(|rest| rest.strip_suffix(" counter"))
        {
            counters.insert(name.to_string());
        }
    }
    let mut text = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let described = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|prefix| Some((prefix, line.strip_prefix(prefix)?)));
        match described {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let name = if counters.contains(name) {
                    format!("{name}_total")
                } else {
                    name.to_string()
                };
                text.push_str(&format!("{prefix}{name} {tail}"));
            }
            None => text.push_str(line),
        }
        text.push('\n');
    }
    text
}
